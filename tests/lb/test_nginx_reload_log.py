"""How the driver reads a reload's outcome from nginx's error log (appliance/lb/node.py,
reload_said), on the log lines nginx 1.22 writes (taken from a real SIGHUP). The real
reloads are test_nginx_changes.py's; this holds the order that a loaded machine makes
and a quiet one almost never: the SIGHUP received before a fresh start's first workers."""

from appliance.lb.node import reload_said

SIGNAL = "[notice] 66#66: signal 1 (SIGHUP) received from 61, reconfiguring\n"
TAKEN = "[notice] 66#66: reconfiguring\n"


def alive_unless(*gone):
    return lambda pid: pid not in gone


def test_nothing_is_confirmed_before_the_master_takes_the_reload_up():
    # a start still under way: its first worker starts after the signal's line, under
    # the old configuration; the ports the reload adds are not open yet
    text = SIGNAL + "[notice] 66#66: start worker process 67\n"
    assert reload_said(text, old=[], alive=alive_unless()) is None


def test_a_worker_started_before_the_reload_counts_as_old():
    text = (SIGNAL + "[notice] 66#66: start worker process 67\n" + TAKEN +
            "[notice] 66#66: start worker process 71\n")
    assert reload_said(text, old=[], alive=alive_unless()) is None
    text += "[notice] 67#67: gracefully shutting down\n"
    assert reload_said(text, old=[], alive=alive_unless()) == "applied"


def test_applied_when_new_workers_run_and_the_old_ones_stopped_accepting():
    text = SIGNAL + TAKEN + "[notice] 66#66: start worker process 71\n"
    assert reload_said(text, old=[67], alive=alive_unless()) is None
    assert reload_said(text, old=[67], alive=alive_unless(67)) == "applied"


def test_a_refused_configuration_gives_nginx_words():
    text = (SIGNAL + TAKEN + '[emerg] 66#66: bind() to 127.0.0.1:80 failed '
            '(98: Address already in use)\n')
    said = reload_said(text, old=[67], alive=alive_unless())
    assert said.startswith("[notice] 66#66: reconfiguring") and "Address already in use" in said
