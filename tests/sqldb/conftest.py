from tests import tmpfs

tmp_path_factory = tmpfs.tmp_path_factory_on_tmpfs()
