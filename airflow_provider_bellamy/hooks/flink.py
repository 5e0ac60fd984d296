"""Apache Flink: the JobManager's REST API and ``flink run`` submissions.

Connection type ``flink``: ``host``/``port`` are the JobManager's REST endpoint (the web UI
port, 8081 by default); ``schema`` may be ``https``. Extras:

``flink_bin``
    path of the ``flink`` command line client;
``flink_home``
    a Flink distribution (``<flink_home>/bin/flink``), used when ``flink_bin`` is not set;
``python``
    interpreter used for PyFlink scripts (``-pyclientexec``/``-pyexec``), default: the one of
    the virtual environment ``flink_bin`` lives in;
``flink_conf_dir``
    ``FLINK_CONF_DIR`` for the client (its JVM options and logging); default: the
    distribution's own ``conf``.

Without any of these the client is looked up in this order: ``$BELLAMY_FLINK_VENV``, the
project's ``.venv-flink`` (scripts/setup-flink.sh), ``$FLINK_HOME``, ``flink`` on ``PATH``.

Submissions run the client as an argument list (never a shell string) and give the job a
deterministic id (``$internal.pipeline.job-id``) when the caller asks for one, so a task that
is retried after a worker died finds its job instead of submitting it twice.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook

from airflow_provider_bellamy.exceptions import (
    BellamyError,
    InvalidInputError,
    JobEndpointUnreachableError,
    JobFailedError,
    UnknownJobIdError,
)
from airflow_provider_bellamy.hooks.job import JobStatusHook, wait_until_terminal
from airflow_provider_bellamy.hooks.job_status import (
    FLINK_JOB_ID_RE,
    FLINK_TERMINAL_STATES,
    FlinkJob,
    flink_job_steps,
    parse_flink_job,
    summarize_flink_exceptions,
    validate_job_id,
)
from airflow_provider_bellamy.masking import find_secrets, mask_args, mask_text, register_secrets
from airflow_provider_bellamy.spec import parse_conf

# Importable from here as before: the REST parsing lives with the job status protocol
# (hooks.job_status), the errors in exceptions.py.
__all__ = [
    "DEFAULT_REST_PORT",
    "FLINK_JOB_ID_RE",
    "FLINK_TERMINAL_STATES",
    "FlinkHook",
    "FlinkJob",
    "FlinkJobFailedError",
    "FlinkSubmissionError",
    "InsufficientSlotsError",
    "JobEndpointUnreachableError",
    "UnknownJobIdError",
    "parse_flink_job",
    "summarize_flink_exceptions",
    "validate_job_id",
]
# A failed Flink job raises the neutral JobFailedError (kind="flink"); the old name stays.
FlinkJobFailedError = JobFailedError

DEFAULT_REST_PORT = 8081
_SUBMITTED_RE = re.compile(r"JobID\s+([0-9a-fA-F]{32})")


class InsufficientSlotsError(InvalidInputError):
    """The requested parallelism exceeds the free task slots; raised before anything is submitted."""

    def __init__(self, parallelism: int, free: int, total: int, url: str) -> None:
        self.free = free
        self.total = total
        super().__init__(
            "parallelism",
            parallelism,
            f"exceeds the {free} free task slot(s) of the Flink cluster at {url} "
            f"({total} slot(s) in total); nothing was submitted",
        )


class FlinkSubmissionError(BellamyError):
    """``flink run`` failed; the message carries the client's own error lines."""


def _find_default_flink_bin() -> Path | None:
    candidates: list[Path] = []
    venv = os.environ.get("BELLAMY_FLINK_VENV")
    roots = [Path(venv)] if venv else []
    # An editable install or a checkout: the project's own .venv-flink beside the package.
    roots.append(Path(__file__).resolve().parents[2] / ".venv-flink")
    roots.append(Path.cwd() / ".venv-flink")
    for root in roots:
        candidates.extend(sorted(root.glob("lib/python3*/site-packages/pyflink/bin/flink")))
    if os.environ.get("FLINK_HOME"):
        candidates.append(Path(os.environ["FLINK_HOME"]) / "bin" / "flink")
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    on_path = shutil.which("flink")
    return Path(on_path) if on_path else None


def _venv_python_for(flink_bin: Path) -> Path | None:
    """The interpreter of the virtual environment a PyFlink ``bin/flink`` was installed into."""
    parts = flink_bin.resolve().parts
    if "site-packages" in parts:
        venv_root = Path(*parts[: parts.index("site-packages") - 2])
        python = venv_root / "bin" / "python"
        if python.exists():
            return python
    return None


class FlinkHook(BaseHook):
    """Talks to one Flink cluster: REST queries and ``flink run --detached`` submissions."""

    conn_name_attr = "flink_conn_id"
    default_conn_name = "flink_default"
    conn_type = "flink"
    hook_name = "Apache Flink (Bellamy)"

    def __init__(
        self,
        flink_conn_id: str | None = default_conn_name,
        *,
        rest_url: str | None = None,
        flink_bin: str | None = None,
        python: str | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        super().__init__()
        if rest_url is None and not flink_conn_id:
            raise InvalidInputError("flink_conn_id", flink_conn_id, "give a connection id or rest_url")
        self.flink_conn_id = flink_conn_id
        self._rest_url = rest_url.rstrip("/") if rest_url else None
        self._flink_bin = flink_bin
        self._python = python
        self.timeout_s = timeout_s
        self._extra: dict[str, Any] | None = None

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["login", "password"],
            "relabeling": {"host": "JobManager REST host", "port": "REST port", "schema": "http or https"},
            "placeholders": {
                "host": "127.0.0.1",
                "port": str(DEFAULT_REST_PORT),
                "extra": '{"flink_bin": "/opt/flink/bin/flink", "python": "/opt/pyflink/bin/python"}',
            },
        }

    # -- connection ---------------------------------------------------------------------------

    def _load_connection(self) -> None:
        if self._extra is not None:
            return
        self._read_connection()
        # A REST URL with user:password@ ends up in `flink run -m` and in error messages.
        register_secrets(find_secrets(self._rest_url or ""))

    def _read_connection(self) -> None:
        if self.flink_conn_id is None:
            self._extra = {}
            return
        conn = self.get_connection(self.flink_conn_id)
        self._extra = dict(conn.extra_dejson or {})
        if self._rest_url is None:
            if not conn.host:
                raise InvalidInputError(
                    f"connection {self.flink_conn_id}.host", conn.host, "the JobManager REST host is required"
                )
            host = conn.host
            if "://" in host:
                self._rest_url = host.rstrip("/") if not conn.port else f"{host.rstrip('/')}:{conn.port}"
            else:
                scheme = conn.schema or self._extra.get("scheme") or "http"
                if scheme not in ("http", "https"):
                    raise InvalidInputError(
                        f"connection {self.flink_conn_id}.schema", scheme, "use http or https"
                    )
                self._rest_url = f"{scheme}://{host}:{conn.port or DEFAULT_REST_PORT}"

    @property
    def rest_url(self) -> str:
        self._load_connection()
        assert self._rest_url is not None
        return self._rest_url

    @property
    def extra(self) -> dict[str, Any]:
        self._load_connection()
        assert self._extra is not None
        return self._extra

    # -- REST ---------------------------------------------------------------------------------

    def job_status_hook(self) -> JobStatusHook:
        """The REST side of this cluster (``kind="flink"``): every request goes through it."""
        rest = getattr(self, "_rest", None)
        if rest is None:
            rest = JobStatusHook("flink", self.rest_url, timeout_s=self.timeout_s)
            self._rest = rest
        return rest

    def _get_json(self, path: str) -> Any:
        return self.job_status_hook().get_json(path)

    def overview(self) -> dict[str, Any]:
        """``GET /overview``: task managers, total and available slots, job counts, version."""
        return dict(self._get_json("/overview"))

    def free_slots(self) -> tuple[int, int]:
        """``(available, total)`` task slots of the cluster now."""
        data = self.overview()
        return int(data.get("slots-available", 0)), int(data.get("slots-total", 0))

    def list_jobs(self) -> list[dict[str, Any]]:
        """``GET /jobs/overview``: every job the JobManager remembers, newest state first."""
        return list(self._get_json("/jobs/overview").get("jobs", []))

    def find_job(self, job_id: str) -> FlinkJob | None:
        """The job, or ``None`` when the JobManager does not know it."""
        rest = self.job_status_hook()
        return rest.drive(flink_job_steps(validate_job_id(job_id), rest.where))

    def get_job(self, job_id: str) -> FlinkJob:
        job = self.find_job(job_id)
        if job is None:
            raise UnknownJobIdError(job_id, self.job_status_hook().where)
        return job

    def get_exceptions(self, job_id: str) -> dict[str, Any]:
        return dict(self._get_json(f"/jobs/{validate_job_id(job_id)}/exceptions"))

    def failure_cause(self, job_id: str) -> str:
        return summarize_flink_exceptions(self.get_exceptions(job_id))

    def cancel_job(self, job_id: str) -> None:
        status, body = self.job_status_hook().request("PATCH", f"/jobs/{validate_job_id(job_id)}?mode=cancel")
        if status not in (200, 202):
            raise JobEndpointUnreachableError(
                self.rest_url, f"cancelling {job_id} answered HTTP {status}: {body}"
            )

    def wait_for_job(
        self,
        job_id: str,
        *,
        poll_interval_s: float = 2.0,
        timeout_s: float | None = None,
        on_poll: Callable[[FlinkJob], None] | None = None,
    ) -> FlinkJob:
        """Poll ``/jobs/<id>`` until the job is FINISHED, FAILED or CANCELED."""
        return wait_until_terminal(
            lambda: self.get_job(job_id),
            what=f"Flink job {job_id}",
            poll_interval_s=poll_interval_s,
            timeout_s=timeout_s,
            on_poll=on_poll,
        )

    def check_free_slots(self, parallelism: int) -> tuple[int, int]:
        """Raise :class:`InsufficientSlotsError` when ``parallelism`` exceeds the free slots."""
        free, total = self.free_slots()
        if parallelism > free:
            raise InsufficientSlotsError(parallelism, free, total, self.rest_url)
        return free, total

    # -- submission ---------------------------------------------------------------------------

    @property
    def flink_bin(self) -> Path:
        explicit = self._flink_bin or self.extra.get("flink_bin")
        if explicit:
            path = Path(str(explicit))
        elif self.extra.get("flink_home"):
            path = Path(str(self.extra["flink_home"])) / "bin" / "flink"
        else:
            found = _find_default_flink_bin()
            if found is None:
                raise InvalidInputError(
                    "flink_bin",
                    None,
                    "no Flink client found: set the connection extra flink_bin or flink_home, $FLINK_HOME, "
                    "or run scripts/setup-flink.sh to create .venv-flink",
                )
            path = found
        if not path.is_file():
            raise InvalidInputError("flink_bin", str(path), "no such file")
        return path

    @property
    def python(self) -> Path | None:
        explicit = self._python or self.extra.get("python")
        if explicit:
            path = Path(str(explicit))
            if not path.exists():
                raise InvalidInputError("python", str(path), "no such interpreter")
            return path
        return _venv_python_for(self.flink_bin)

    def build_run_command(
        self,
        application: str,
        parallelism: int,
        *,
        application_args: Sequence[str] = (),
        conf: Mapping[str, Any] | None = None,
        entry_class: str | None = None,
        job_id: str | None = None,
        py_files: Sequence[str] = (),
    ) -> list[str]:
        """The ``flink run --detached`` argument list for a PyFlink script or a jar."""
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
            raise InvalidInputError("parallelism", parallelism, "must be an integer >= 1")
        app = Path(str(application))
        if not app.is_file():
            raise InvalidInputError("application", str(application), "no such file")
        flink = self.flink_bin
        # -m takes the REST address: the client talks to the same JobManager we query.
        host_port = self.rest_url.split("://", 1)[-1]
        cmd: list[str] = [str(flink), "run", "--detached", "-m", host_port, "-p", str(parallelism)]
        settings = parse_conf(conf, "conf")
        if job_id is not None:
            settings["$internal.pipeline.job-id"] = validate_job_id(job_id)
        for key, value in settings.items():
            cmd += ["-D", f"{key}={value}"]
        if app.suffix == ".py":
            python = self.python
            if python is not None:
                cmd += ["-pyclientexec", str(python), "-pyexec", str(python)]
            for extra in py_files:
                cmd += ["-pyfs", str(extra)]
            cmd += ["-py", str(app)]
        elif app.suffix == ".jar":
            if entry_class:
                cmd += ["-c", entry_class]
            cmd.append(str(app))
        else:
            raise InvalidInputError("application", str(application), "must be a PyFlink .py script or a .jar")
        cmd += [str(a) for a in application_args]
        return cmd

    def _client_env(self) -> dict[str, str]:
        env = dict(os.environ)
        python = self.python
        if python is not None:
            # PyFlink's launcher and UDF workers call "python": make it the Flink venv's.
            env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
            env["PYFLINK_CLIENT_EXECUTABLE"] = str(python)
        conf_dir = self.extra.get("flink_conf_dir")
        if conf_dir:
            env["FLINK_CONF_DIR"] = str(conf_dir)
        else:
            env.pop("FLINK_CONF_DIR", None)
        return env

    def submit(
        self,
        application: str,
        parallelism: int,
        *,
        application_args: Sequence[str] = (),
        conf: Mapping[str, Any] | None = None,
        entry_class: str | None = None,
        job_id: str | None = None,
        py_files: Sequence[str] = (),
        timeout_s: float = 600.0,
    ) -> str:
        """Run ``flink run --detached`` and return the id of the submitted job."""
        cmd = self.build_run_command(
            application,
            parallelism,
            application_args=application_args,
            conf=conf,
            entry_class=entry_class,
            job_id=job_id,
            py_files=py_files,
        )
        # -D credentials, --password/--token arguments, user:password@ in -m: never in the logs.
        secrets = find_secrets(cmd)
        register_secrets(secrets)
        shown = mask_args(cmd)
        self.log.info("Submitting to Flink: %s", shown)
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout_s, env=self._client_env(), check=False
            )
        except subprocess.TimeoutExpired:
            # not chained: TimeoutExpired's own message holds the unmasked command
            raise FlinkSubmissionError(f"flink run did not return within {timeout_s} s: {shown}") from None
        output = mask_text((proc.stdout or "") + (proc.stderr or ""), secrets)
        match = _SUBMITTED_RE.search(output)
        if proc.returncode != 0 or match is None:
            raise FlinkSubmissionError(
                f"flink run exited with code {proc.returncode} without submitting a job; "
                f"client output:\n{_client_error_lines(output)}"
            )
        submitted = match.group(1).lower()
        if job_id is not None and submitted != job_id.lower():
            self.log.warning(
                "Flink ignored the requested job id %s and used %s: a retried task cannot find this job",
                job_id,
                submitted,
            )
        for line in output.splitlines():
            if line.strip() and not line.startswith(("\tat ", "SLF4J")):
                self.log.info("flink: %s", line)
        return submitted


def _client_error_lines(output: str, limit: int = 40) -> str:
    """The informative part of a failed ``flink run``: messages and causes, not stack frames."""
    keep = [
        ln
        for ln in output.splitlines()
        if ln.strip() and not ln.lstrip().startswith(("at ", "...")) and not ln.startswith("SLF4J")
    ]
    return "\n".join(keep[-limit:])
