"""The XML of the storage-pool volumes the compute pass makes (libvirt's storage volume
format), beside domain_xml.py which writes the domains that use them. Pure: no libvirt."""

from html import escape  # xml.sax.saxutils would bring urllib.request and ssl along

GB = 1024 ** 3


def qcow2(name, size_gb, image=None, backing_path=None):
    """A qcow2 volume of `size_gb`, an overlay of `image` (a cache record) at
    `backing_path` when given; never smaller than the image, or the guest would see a
    truncated disk."""
    size = size_gb * GB
    backing = ""
    if image is not None:
        size = max(size, int(image.get("virtual_size") or 0))
        backing = (f"<backingStore><path>{escape(backing_path)}</path>"
                   f"<format type='{image['format']}'/></backingStore>")
    return (f"<volume><name>{escape(name)}</name><capacity unit='B'>{size}</capacity>"
            f"<target><format type='qcow2'/></target>{backing}</volume>")


def raw(name, size_bytes):
    """A raw volume of `size_bytes`: an upload's target, or (size 0) its `.done` marker."""
    return (f"<volume><name>{escape(name)}</name><capacity unit='B'>{size_bytes}"
            "</capacity><target><format type='raw'/></target></volume>")
