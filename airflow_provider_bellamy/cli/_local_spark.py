"""Start and stop a Spark standalone cluster (one master, N workers) on 127.0.0.1: for
``bellamy demo`` and the test fixtures only, not provider API (it starts daemons and kills
the ones it started).

Uses the ``spark-daemon.sh`` that the pyspark wheel ships (it has no
``start-master.sh``). Every daemon gets its own pid, log and work directory under
one temporary folder, so two clusters (a test session and the demo) never collide,
and ``stop()`` only ends the daemons this object started.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_bellamy.exceptions import BellamyError, InvalidInputError

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


class SparkClusterError(BellamyError):
    """The standalone cluster could not be started or queried."""


def spark_home() -> Path:
    """The Spark distribution inside the pyspark wheel (bin/spark-submit, sbin/spark-daemon.sh, jars/)."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.origin:
        raise SparkClusterError("pyspark is not installed: pip install 'airflow-provider-bellamy[spark]'")
    return Path(spec.origin).parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fetch_json(url: str, timeout_s: float = 5.0) -> Any:
    """GET a JSON document (only used against the cluster's own loopback web UI)."""
    if not url.startswith(("http://", "https://")):
        raise InvalidInputError("url", url, "must be an http(s) URL")
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return json.loads(response.read().decode("utf-8"))


@dataclass
class SparkStandaloneCluster:
    """A running standalone cluster. Use ``start_standalone_cluster`` to make one."""

    workers: int
    cores_per_worker: int
    memory_per_worker: str
    base_dir: Path
    master_port: int
    master_webui_port: int
    worker_webui_ports: list[int] = field(default_factory=list)
    ident: str = ""
    # The master's REST submission server (0: off). The Spark provider asks it for a driver's
    # state when it tracks a cluster-mode driver and when a retry reattaches to one.
    rest_port: int = 0
    _started: list[tuple[str, int]] = field(default_factory=list)
    _owns_base_dir: bool = False

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def webui_url(self) -> str:
        return f"http://127.0.0.1:{self.master_webui_port}"

    @property
    def json_url(self) -> str:
        # the trailing slash matters: /json without it redirects
        return f"{self.webui_url}/json/"

    def env(self) -> dict[str, str]:
        home = spark_home()
        env = dict(os.environ)
        env.update(
            {
                "SPARK_HOME": str(home),
                "SPARK_PID_DIR": str(self.base_dir / "pids"),
                "SPARK_LOG_DIR": str(self.base_dir / "logs"),
                "SPARK_WORKER_DIR": str(self.base_dir / "work"),
                "SPARK_IDENT_STRING": self.ident,
                "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOCAL_DIRS": str(self.base_dir / "local"),
                # the daemons are small; the default 1 GB heap per daemon adds up on a 2-core box
                "SPARK_DAEMON_MEMORY": "256m",
            }
        )
        return env

    def _daemon(
        self, action: str, cls: str, instance: int, *args: str, extra_env: dict[str, str] | None = None
    ) -> None:
        script = spark_home() / "sbin" / "spark-daemon.sh"
        cmd = ["bash", str(script), action, cls, str(instance), *args]
        env = {**self.env(), **(extra_env or {})}
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode != 0:
            raise SparkClusterError(
                f"spark-daemon.sh {action} {cls.rsplit('.', 1)[-1]} {instance} failed "
                f"(exit {proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
            )

    def _daemon_async(self, action: str, cls: str, instance: int, *args: str) -> subprocess.Popen[str]:
        script = spark_home() / "sbin" / "spark-daemon.sh"
        cmd = ["bash", str(script), action, cls, str(instance), *args]
        return subprocess.Popen(
            cmd, env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def _master_opts(self) -> str:
        if not self.rest_port:
            return "-Dspark.master.rest.enabled=false"
        return f"-Dspark.master.rest.enabled=true -Dspark.master.rest.port={self.rest_port}"

    def _pid_file(self, cls: str, instance: int) -> Path:
        return self.base_dir / "pids" / f"spark-{self.ident}-{cls}-{instance}.pid"

    def status(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """The master's JSON status (workers, active and completed applications)."""
        return fetch_json(self.json_url, timeout_s)

    def completed_app(self, *, app_id: str | None = None, name: str | None = None) -> dict[str, Any] | None:
        """A finished application's record from the master (``duration`` in ms), by id or by name."""
        apps = self.status().get("completedapps", [])
        for app in apps:
            if (app_id and app.get("id") == app_id) or (name and not app_id and app.get("name") == name):
                return app
        return None

    def start(self, timeout_s: float = 90.0) -> SparkStandaloneCluster:
        for sub in ("pids", "logs", "work", "local"):
            (self.base_dir / sub).mkdir(parents=True, exist_ok=True)
        try:
            self._daemon(
                "start",
                MASTER_CLASS,
                1,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.master_port),
                "--webui-port",
                str(self.master_webui_port),
                extra_env={"SPARK_MASTER_OPTS": self._master_opts()},
            )
            self._started.append((MASTER_CLASS, 1))
            self._wait(lambda s: True, timeout_s, "the master's web UI to answer")
            # spark-daemon.sh sleeps ~2 s after each launch to check the JVM stayed up: start
            # the workers side by side instead of one after the other.
            launches = []
            for i in range(1, self.workers + 1):
                port = free_port()
                self.worker_webui_ports.append(port)
                launches.append(
                    self._daemon_async(
                        "start",
                        WORKER_CLASS,
                        i,
                        "--host",
                        "127.0.0.1",
                        "--webui-port",
                        str(port),
                        "--cores",
                        str(self.cores_per_worker),
                        "--memory",
                        self.memory_per_worker,
                        "--work-dir",
                        str(self.base_dir / "work"),
                        self.master_url,
                    )
                )
                self._started.append((WORKER_CLASS, i))
            for i, proc in enumerate(launches, start=1):
                out, err = proc.communicate(timeout=120)
                if proc.returncode != 0:
                    raise SparkClusterError(
                        f"spark-daemon.sh start Worker {i} failed: {out[-2000:]} {err[-2000:]}"
                    )
            self._wait(
                lambda s: s.get("aliveworkers", 0) >= self.workers,
                timeout_s,
                f"{self.workers} workers to register",
            )
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self, ready: Any, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                if ready(self.status(timeout_s=2.0)):
                    return
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = exc
            time.sleep(0.5)
        logs = sorted((self.base_dir / "logs").glob("*.out"))
        tail = logs[-1].read_text(errors="replace")[-1500:] if logs else "(no log)"
        raise SparkClusterError(
            f"timed out after {timeout_s:.0f} s waiting for {what} ({last}); log tail:\n{tail}"
        )

    def stop(self) -> None:
        """Stop every daemon this object started (workers first), then remove its folder."""
        for cls, instance in reversed(self._started):
            pid_file = self._pid_file(cls, instance)
            pid = None
            if pid_file.exists():
                try:
                    pid = int(pid_file.read_text().strip())
                except ValueError:
                    pid = None
            with contextlib.suppress(SparkClusterError, subprocess.TimeoutExpired):
                self._daemon("stop", cls, instance)
            if pid is not None and _alive(pid):
                # spark-daemon.sh stop sends SIGTERM and gives up after a while; make sure
                # the JVM we started is gone (only that pid, never a broad kill).
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        self._started.clear()
        if self._owns_base_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> SparkStandaloneCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_standalone_cluster(
    workers: int = 2,
    *,
    cores_per_worker: int = 1,
    memory_per_worker: str = "1g",
    base_dir: str | Path | None = None,
    timeout_s: float = 90.0,
    rest: bool = False,
) -> SparkStandaloneCluster:
    """Start a master and ``workers`` workers on 127.0.0.1 and wait until all have registered.

    ``rest``: also the master's REST submission server (on a free port, ``rest_port``), which
    the Spark provider needs to track cluster-mode drivers and to reattach a retry to one."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InvalidInputError("workers", workers, "must be an integer >= 1")
    if isinstance(cores_per_worker, bool) or not isinstance(cores_per_worker, int) or cores_per_worker < 1:
        raise InvalidInputError("cores_per_worker", cores_per_worker, "must be an integer >= 1")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise SparkClusterError(
            "java is not installed (Spark needs a JRE 17; scripts/setup-services.sh installs it)"
        )
    owns = base_dir is None
    base = Path(base_dir) if base_dir is not None else Path(tempfile.mkdtemp(prefix="bellamy-spark-"))
    cluster = SparkStandaloneCluster(
        workers=workers,
        cores_per_worker=cores_per_worker,
        memory_per_worker=memory_per_worker,
        base_dir=base,
        master_port=free_port(),
        master_webui_port=free_port(),
        ident=f"bellamy{os.getpid()}x{base.name[-8:]}",
        _owns_base_dir=owns,
        rest_port=free_port() if rest else 0,
    )
    return cluster.start(timeout_s=timeout_s)
