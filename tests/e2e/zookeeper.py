"""A real standalone ZooKeeper for cluster-mode tests: Debian's ``zookeeper`` package as a
subprocess (``make zookeeper`` installs it).

``ZooKeeperServer(workdir).start()`` writes ``zoo.cfg`` and a log4j config into ``workdir``,
runs ``org.apache.zookeeper.server.ZooKeeperServerMain`` on a free loopback port and waits
until it serves (``srvr`` answers with its version). It can be stopped, killed, paused (SIGSTOP) and started again on
the same data dir and the same port, so a connect string handed to brokers stays valid.

``tickTime=500`` lets clients ask for sessions as short as 1 s (ZooKeeper's floor is
2 * tickTime). Without ZooKeeper or Java the tests skip, except under ``CI=true`` where they
fail: a CI run that silently skips cluster tests proves nothing.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from ports import free_port
from procs import freeze

START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 15.0
TICK_TIME_MS = 500

# Debian: /usr/share/java/zookeeper.jar (package libzookeeper-java, pulled in by `zookeeper`)
# names its dependencies in its manifest's Class-Path; slf4j-log4j12 + log4j 1.2 make its
# logging go somewhere (without them slf4j logs nothing, which is survivable).
DEBIAN_JARS = ("zookeeper.jar", "zookeeper-jute.jar")
DEBIAN_LOGGING_JARS = ("slf4j-log4j12.jar", "log4j-1.2.jar")
DEBIAN_JAVA_DIR = Path("/usr/share/java")
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"

# Everything goes to the console, which start() sends to zookeeper.log: one file to read
# whatever logging backend the classpath brings (Debian: log4j 1.2; a tarball: logback).
LOG4J_PROPERTIES = """\
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.Target=System.out
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
"""


class ZooKeeperUnavailable(Exception):
    """Java or ZooKeeper's jars are not installed."""


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def require_zookeeper() -> tuple[str, list[str]]:
    """(java, classpath), or skip the test (pytest.fail under CI=true)."""
    try:
        return find_java(), find_classpath()
    except ZooKeeperUnavailable as exc:
        message = f"{exc}: run 'make zookeeper' (apt-get install zookeeper)"
        if in_ci():
            pytest.fail(f"CI=true and {message}", pytrace=False)
        pytest.skip(message)


def find_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperUnavailable("no java on PATH (nor $JAVA_HOME/bin/java)")
    return java


def find_classpath() -> list[str]:
    """ZooKeeper's jars: ``$ZOOKEEPER_HOME/lib`` of a release tarball when set, else Debian's."""
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        jars = sorted(str(p) for p in (Path(home) / "lib").glob("*.jar"))
        if not jars:
            raise ZooKeeperUnavailable(f"no jars in $ZOOKEEPER_HOME/lib ({home}/lib)")
        return jars
    missing = [name for name in DEBIAN_JARS if not (DEBIAN_JAVA_DIR / name).is_file()]
    if missing:
        raise ZooKeeperUnavailable(f"ZooKeeper is not installed ({DEBIAN_JAVA_DIR}/{missing[0]})")
    names = DEBIAN_JARS + tuple(n for n in DEBIAN_LOGGING_JARS if (DEBIAN_JAVA_DIR / n).is_file())
    return [str(DEBIAN_JAVA_DIR / name) for name in names]


def four_letter_word(port: int, word: str, timeout: float = 1.0) -> str:
    """Send a four-letter word (``ruok``, ``srvr``, ``mntr``...) and return the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(word.encode())
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


class ZooKeeperServer:
    """One standalone ZooKeeper over ``workdir/data``; stoppable, killable, pausable, restartable.

    The port is chosen on the first start and kept on later ones.
    """

    def __init__(self, workdir: Path, port: int = 0, tick_time_ms: int = TICK_TIME_MS) -> None:
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.log_path = workdir / "zookeeper.log"
        self.config_path = workdir / "zoo.cfg"
        self.port = port
        self.tick_time_ms = tick_time_ms
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    @property
    def connect_string(self) -> str:
        assert self.port, "ZooKeeper never started"
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> ZooKeeperServer:
        """Start (or start again, same data dir and port) and wait until it serves requests."""
        assert self.proc is None, "ZooKeeper already running"
        java, classpath = require_zookeeper()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fixed = bool(self.port)
        # A port chosen now could be taken before ZooKeeper binds it; retry then (first start).
        for _ in range(1 if fixed else 3):
            if not fixed:
                self.port = free_port()
            self._write_config()
            with self.log_path.open("ab") as log:
                log.write(f"--- start on port {self.port}\n".encode())
                self.proc = subprocess.Popen(
                    [
                        java,
                        "-Xms32m",
                        "-Xmx256m",
                        "-XX:+UseSerialGC",
                        "-XX:TieredStopAtLevel=1",
                        "-Dzookeeper.jmx.log4j.disable=true",
                        f"-Dlog4j.configuration=file:{self.workdir / 'log4j.properties'}",
                        "-cp",
                        os.pathsep.join(classpath),
                        MAIN_CLASS,
                        str(self.config_path),
                    ],
                    cwd=self.workdir,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            if self._wait_ready():
                self.paused = False
                return self
            self.proc = None
        raise AssertionError(f"ZooKeeper did not start on port {self.port}:\n{self.log()}")

    def _write_config(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            f"tickTime={self.tick_time_ms}\n"
            f"dataDir={self.data_dir}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons,dump\n"
            # The default 64 MB preallocation per transaction log is wasted on tests.
            "preAllocSize=1024\n"
            "autopurge.purgeInterval=0\n"
        )
        (self.workdir / "log4j.properties").write_text(LOG4J_PROPERTIES)

    def _wait_ready(self) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if self.is_serving():
                return True
            time.sleep(0.05)
        self.proc.kill()
        self.proc.wait()
        return False

    def is_ok(self, timeout: float = 1.0) -> bool:
        """Whether the server answers ``ruok`` with ``imok`` (False while paused or down)."""
        try:
            return four_letter_word(self.port, "ruok", timeout) == "imok"
        except OSError:
            return False

    def is_serving(self, timeout: float = 1.0) -> bool:
        """Whether the server takes requests: ``ruok`` says imok as soon as the port is open,
        ``srvr`` only answers with the version once sessions can be opened."""
        try:
            return "Zookeeper version:" in four_letter_word(self.port, "srvr", timeout)
        except OSError:
            return False

    def four_letter_word(self, word: str, timeout: float = 1.0) -> str:
        return four_letter_word(self.port, word, timeout)

    def stop(self) -> int:
        """SIGTERM and wait; returns the exit status (SIGKILL after a timeout)."""
        proc = self._running_proc()
        if self.paused:
            self.resume()
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        self.proc = None
        return code

    def kill(self) -> None:
        """SIGKILL: a crash. Data written so far stays in the data dir."""
        proc = self._running_proc()
        proc.kill()
        proc.wait()
        self.proc = None
        self.paused = False

    def restart(self) -> ZooKeeperServer:
        """Stop when running, then start again on the same data dir and port."""
        if self.proc is not None:
            self.stop()
        return self.start()

    def pause(self) -> None:
        """SIGSTOP: the process stays but answers nothing (a hung or partitioned server)."""
        freeze(self._running_proc())
        self.paused = True

    def resume(self) -> None:
        """SIGCONT after pause()."""
        self._running_proc().send_signal(signal.SIGCONT)
        self.paused = False

    def close(self) -> None:
        """Stop whatever runs; safe to call any number of times (fixture teardown)."""
        if self.proc is None:
            return
        if self.proc.poll() is not None:
            self.proc = None
            return
        self.stop()

    def _running_proc(self) -> subprocess.Popen[bytes]:
        assert self.proc is not None, "ZooKeeper not running"
        return self.proc

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
