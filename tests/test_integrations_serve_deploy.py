"""activeprp serve as an operator starts it (review s68d): an address it cannot listen on is one line and exit 2,
before the judge is built; an app start-up that fails is one line and exit 1; so is a bad
$PROMETHEUS_MULTIPROC_DIR (exit 2)."""

import contextlib
import errno
import logging
import os
import socket
import subprocess
import sys

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")
import uvicorn  # noqa: E402

import activeprp_integrations.serve as serve  # noqa: E402
from activeprp_cli import main  # noqa: E402
from activeprp_integrations.serve.protocol import REUSE_ADDRESS, bind_sockets, listen  # noqa: E402
from activeprp_integrations.serve.service import RerankService  # noqa: E402
from tests._serve_helpers import WordJudge  # noqa: E402


@pytest.fixture
def judges(monkeypatch):
    """The judges the command built (a ``WordJudge`` each); uvicorn's logging set-up skipped (it would bind the
    loggers to pytest's capture of stderr, closed after the test)."""
    built: list = []
    monkeypatch.setattr(serve, "make_comparator", lambda args: contextlib.nullcontext(built.append(WordJudge())
                                                                                      or built[-1]))
    monkeypatch.setattr(uvicorn.Config, "configure_logging", lambda config: None)
    return built


@pytest.fixture
def uvicorn_log():
    """The messages of uvicorn's server log (``uvicorn.error``, INFO and up) as (level, message)."""
    records: list = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: records.append((record.levelname, record.getMessage()))
    logger = logging.getLogger("uvicorn.error")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_a_port_taken_is_one_line_and_exit_2_before_the_judge_is_built(judges, capsys):
    """uvicorn's ERROR came between its start-up lines, exit 3 (documented nowhere), after the judge was built:
    11 s of loading with the bundled model, minutes with a large one."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--comparator", "simulated", "--port", str(port)]) == 2
    assert capsys.readouterr().err == (f"activeprp: error: cannot listen on 127.0.0.1:{port}: address already in "
                                       "use: another process listens there: stop it, or pass another --port\n")
    assert judges == []


def test_a_host_that_is_not_this_machine_s_is_one_line_and_exit_2_before_the_judge_is_built(judges, capsys,
                                                                                             monkeypatch):
    assert main(["serve", "--comparator", "simulated", "--host", "192.0.2.1"]) == 2  # TEST-NET-1: no one's
    assert capsys.readouterr().err == ("activeprp: error: cannot listen on 192.0.2.1:8080: cannot assign requested "
                                       "address: no interface of this machine has that address: pass one that "
                                       "does with --host (127.0.0.1, or 0.0.0.0 for every interface)\n")

    def unknown(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", unknown)
    assert main(["serve", "--comparator", "simulated", "--host", "nosuchhost.invalid"]) == 2
    assert capsys.readouterr().err == ("activeprp: error: cannot listen on nosuchhost.invalid:8080: name or service "
                                       "not known: --host 'nosuchhost.invalid' must name this machine (an address "
                                       "of one of its interfaces, or a name that resolves to one)\n")
    assert judges == []


def test_the_sockets_are_bound_not_listening_and_closed_when_one_fails():
    """Bound up front, a client is refused until the server starts (as by no server); a failure leaves none open."""
    (sock,) = bind_sockets("127.0.0.1", 0)
    with sock, socket.socket() as client:
        with pytest.raises(ConnectionRefusedError):
            client.connect(sock.getsockname())
        sock.listen()
        with pytest.raises(OSError) as taken:
            bind_sockets("127.0.0.1", sock.getsockname()[1])
    assert taken.value.errno == errno.EADDRINUSE


def test_an_app_start_up_that_fails_is_one_line_and_exit_1(judges, monkeypatch, capsys):
    """uvicorn exits 3 when the app's start-up fails; the command's contract is 1 for a failure while running."""
    async def broken(self):
        raise RuntimeError("injected")

    monkeypatch.setattr(RerankService, "start", broken)
    assert main(["serve", "--comparator", "simulated", "--port", "0"]) == 1
    assert capsys.readouterr().err.endswith("activeprp: error: the server did not start: its application start-up "
                                            "failed (the log above says why)\n")
    assert len(judges) == 1


def test_an_older_uvicorn_serves_and_its_start_up_failure_is_one_line_and_exit_1(judges, monkeypatch, capsys,
                                                                                 uvicorn_log):
    """The serve extra allows uvicorn 0.29; ``uvicorn.config.STARTUP_FAILURE`` exists only since 0.50, and importing
    it made the command say that the serve extra was missing (exit 2). Before 0.50 a failed start-up returns from
    ``Server.startup`` (``uvicorn.run`` exited 3): the command then logged "Uvicorn running on" and exited 0."""
    import uvicorn.config

    monkeypatch.delattr(uvicorn.config, "STARTUP_FAILURE", raising=False)
    new_startup = uvicorn.Server.startup

    async def old_startup(self, sockets=None):  # uvicorn < 0.50: no sys.exit(3) there
        try:
            await new_startup(self, sockets)
        except SystemExit:
            self.should_exit = True

    async def broken(self):
        raise RuntimeError("injected")

    monkeypatch.setattr(uvicorn.Server, "startup", old_startup)
    monkeypatch.setattr(RerankService, "start", broken)
    assert main(["serve", "--comparator", "simulated", "--port", "0"]) == 1
    assert capsys.readouterr().err.endswith("activeprp: error: the server did not start: its application start-up "
                                            "failed (the log above says why)\n")
    said = [message for _, message in uvicorn_log]
    assert "Waiting for application startup." in said
    assert not [m for m in said if m.startswith("Uvicorn running on")]


def lingering_port() -> int:
    """A port on 127.0.0.1 where a connection of a server that stopped lingers (TIME_WAIT, the server closed it
    first, as uvicorn closes an idle keep-alive connection), its listening socket from ``bind_sockets`` and
    ``listen`` as the command's."""
    (sock,) = bind_sockets("127.0.0.1", 0)
    with sock, socket.socket() as client:
        listen(sock, 8)
        client.connect(sock.getsockname())
        conn, _ = sock.accept()
        conn.close()
        assert client.recv(1) == b""  # the server's FIN
        return sock.getsockname()[1]


def test_the_port_is_reserved_while_the_judge_loads():
    """A socket bound with ``SO_REUSEADDR`` and not listening let any other that sets it too (uvicorn, nginx, a
    second ``activeprp serve``) bind the port on Linux and listen there first, after the command's early check."""
    (sock,) = bind_sockets("127.0.0.1", 0)
    with sock:
        for reuse in (1, 0):
            with socket.socket() as other, pytest.raises(OSError) as taken:
                other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, reuse)
                other.bind(sock.getsockname())
            assert taken.value.errno == errno.EADDRINUSE


def test_a_second_server_started_meanwhile_stops_before_its_judge_is_built(monkeypatch, capsys):
    """Two servers started at the same moment on one port both passed the early check; the second then built its
    judge and served while the first loaded its own, and the first stopped once its judge was built."""
    def built(args):
        raise AssertionError("the second server built its judge")

    monkeypatch.setattr(serve, "make_comparator", built)
    (first,) = serve.listen_sockets("127.0.0.1", 0)  # the first server's, its judge loading
    with first:
        port = first.getsockname()[1]
        assert main(["serve", "--comparator", "simulated", "--port", str(port)]) == 2
        listen(first, 8)
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # the first one's
    assert capsys.readouterr().err == (f"activeprp: error: cannot listen on 127.0.0.1:{port}: address already in "
                                       "use: another process listens there: stop it, or pass another --port\n")


@pytest.mark.skipif(not REUSE_ADDRESS, reason="SO_REUSEADDR is not set on this platform")
def test_a_port_where_a_stopped_server_s_connections_linger_is_bound_and_left_to_the_next_server():
    """Bound without ``SO_REUSEADDR``, a socket cannot take a port that connections in TIME_WAIT hold (a minute
    after a server closed them): it binds with the option then. A listening socket turns the option on, so that the
    connections it accepted do not keep the next server (uvicorn's, which sets it) from binding the port."""
    port = lingering_port()
    with socket.socket() as bare, pytest.raises(OSError) as lingering:
        bare.bind(("127.0.0.1", port))
    assert lingering.value.errno == errno.EADDRINUSE  # the connection is still there
    with socket.socket() as uvicorns:
        uvicorns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        uvicorns.bind(("127.0.0.1", port))
    (sock,) = bind_sockets("127.0.0.1", port)
    with sock:
        assert sock.getsockname()[1] == port


@pytest.mark.skipif(sys.platform != "linux", reason="Linux lets two sockets with SO_REUSEADDR bind one port")
def test_a_port_another_server_takes_while_the_judge_loads_is_one_line_and_exit_2(judges, monkeypatch, capsys,
                                                                                  uvicorn_log):
    """Where a stopped server's connections linger, the port is bound with ``SO_REUSEADDR``, not reserved: a
    server that sets it too (uvicorn, nginx) binds and listens there while the judge loads. uvicorn's listen() then
    raised a 78-line traceback (exit 1) after the judge was built; the line is that of a port taken before, the
    other server left serving."""
    bound: list = []
    bind, build = serve.listen_sockets, serve.make_comparator
    other = socket.socket()

    def taken_meanwhile(args):
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind(bound[0].getsockname())
        other.listen()
        return build(args)

    monkeypatch.setattr(serve, "listen_sockets", lambda host, port: bound.extend(bind(host, port)) or bound)
    monkeypatch.setattr(serve, "make_comparator", taken_meanwhile)
    port = lingering_port()
    with other:
        assert main(["serve", "--comparator", "simulated", "--port", str(port)]) == 2
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # the other server still listens
    assert capsys.readouterr().err == (f"activeprp: error: cannot listen on 127.0.0.1:{port}: address already in "
                                       "use: another process listens there: stop it, or pass another --port\n")
    assert len(judges) == 1 and all(sock.fileno() == -1 for sock in bound)
    assert [m for level, m in uvicorn_log if level == "ERROR"] == []


def test_a_prometheus_multiproc_dir_that_is_no_directory_is_one_line_and_exit_2(tmp_path):
    """prometheus-client reads the variable as it is imported and wrote the app's first metric there: a traceback
    (FileNotFoundError), exit 1. The service never reads that directory (one registry per app)."""
    missing = tmp_path / "missing"
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "PROMETHEUS_MULTIPROC_DIR": str(missing)}
    done = subprocess.run([sys.executable, "-m", "activeprp_cli", "serve", "--comparator", "simulated", "--port", "0"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr == (f"activeprp: error: $PROMETHEUS_MULTIPROC_DIR is {str(missing)!r}, not a writable "
                           "directory: prometheus-client writes its metrics there in that mode; activeprp serve does "
                           "not need it (its /metrics serves the metrics of its own process: run one process per "
                           'port, docs/serve.md, "Several replicas"), so unset it\n')


def test_the_auth_key_help_warns_that_ps_shows_it_and_names_the_variable(capsys):
    """``--api-key``'s exposure in ps was told, the service's own key's was not (review s68d)."""
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    start = help_text.index("--auth-key KEY ")
    own = help_text[start:help_text.index(" --client-timeout CLIENT_TIMEOUT ", start)]
    assert "shows to every local user in ps" in own and "prefer $ACTIVEPRP_AUTH_KEYS" in own
