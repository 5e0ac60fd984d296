"""``BellamySparkSubmitHook``: the Spark provider's spark-submit hook, plus what Bellamy reads.

It notes the application id and the standalone driver id spark-submit logs, masks more
secrets than the provider does, and reads what the cluster reports about an application: its
duration and the executors it was granted (a standalone master's ``/json/`` or a history
server, through ``JobStatusHook``), so the operator opens no connection itself.
"""

from __future__ import annotations

import dataclasses
import io
import math
import os
import re
import shutil
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_provider_bellamy.hooks.job import UNPARSED_ANSWER_ERRORS, JobStatusHook, unparsed_answer_note
from airflow_provider_bellamy.hooks.job_status import (
    JobStatus,
    spark_history_attempt_steps,
    spark_master_completed_app_steps,
    status_steps,
    validate_endpoint,
    validate_spark_id,
)
from airflow_provider_bellamy.hooks.spark_timing import (
    EventLogUnreadableError,
    MasterGrantSampler,
    ObservedRun,
    timing_from_event_log,
    timing_from_history,
)

# Standalone ("app-20240101000000-0000"), local ("local-1700000000000"), YARN and Kubernetes ids
# ("spark-" + a random UUID's 32 hex digits: KubernetesConf.getKubernetesAppId). An underscore may
# come before one: with the user's rolling log the only line naming a local or Kubernetes id is
# "Logging events to file:/…/eventlog_v2_<id>/events_1_<id>.zstd".
_APP_ID_RE = re.compile(
    r"(?<![A-Za-z0-9-])(app-\d{14}-\d{4,}|local-\d{10,}|application_\d+_\d+|spark-[0-9a-f]{32})(?![A-Za-z0-9-])"
)
# A standalone cluster-mode driver ("driver-20240101000000-0000"), as spark-submit prints it.
_DRIVER_ID_RE = re.compile(r"\b(driver-\d{14}-\d{4,})\b")
_LOG_TAIL_LINES = 30
# The event-log codecs Spark writes (spark.eventLog.compression.codec) besides zstd, its default,
# which is read (``zstandard``, the [spark] extra): Spark frames these in its own way (lz4's and
# snappy's block streams, lzf's chunks), which no well-kept Python library reads; passed over, named.
_UNREAD_CODECS = ("lz4", "lzf", "snappy")
_ZSTD = "zstd"
_INPROGRESS = ".inprogress"
# The log written for a try stays uncompressed although zstd is read: compressing it would take
# the codec from the site's spark-defaults.conf (lz4 there is unreadable) unless pinned as well, and
# need zstandard importable on every worker, for a file that lives one try. Not rolled: one file.
READABLE_EVENT_LOG_CONF = {"spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false"}


@dataclasses.dataclass(frozen=True)
class EventLogPlace:
    """Where a client-mode application's event log is read from: the user's local directory, or
    one written for this try (``temporary``: every log in it is the application's, removed after)."""

    directory: Path
    temporary: bool


@dataclasses.dataclass(frozen=True)
class EventLogSetting:
    """The event logging a submission's Spark conf and defaults file give, as far as they say."""

    enabled: bool | None
    directory: str | None
    where: str

    @property
    def configured(self) -> bool:
        return self.enabled is not None or self.directory is not None

    def local_directory(self) -> Path | None:
        """The directory when logging is on and it is on this machine (``file:`` or a plain path)."""
        if not self.enabled or not self.directory:
            return None
        url = urlsplit(self.directory)
        if url.scheme not in ("", "file") or url.netloc not in ("", "localhost"):
            return None
        return Path(unquote(url.path))


class BellamySparkSubmitHook(SparkSubmitHook):
    """The provider's hook, also noting the application id and the standalone driver id that
    spark-submit logs, and the last lines it printed (for error messages); and reading what
    the cluster reports about the application (its duration, the executors it was granted)."""

    bellamy_app_id: str | None = None
    bellamy_driver_id: str | None = None
    bellamy_log_tail: deque[str] | None = None
    bellamy_secrets: list[str] | None = None
    _bellamy_webui: str | None = None

    @classmethod
    def adopt(cls, hook: SparkSubmitHook) -> BellamySparkSubmitHook:
        """The provider's hook as this class.

        The provider builds its hook with a fixed argument list; swapping the class (it adds no
        state of its own) keeps every argument the provider passes, now and in later versions.
        """
        hook.__class__ = cls
        return hook  # type: ignore[return-value]

    def set_executors(
        self,
        *,
        conf: dict[str, Any],
        num_executors: int | None,
        total_executor_cores: int | None,
        executor_cores: int | None,
    ) -> None:
        """The sized executors and conf, set on a hook already built (sizing needs its master).

        The provider's constructor only stores these (``_build_spark_submit_command`` reads them),
        so setting them is what building the hook again with them would do, without a second
        connection lookup."""
        self._conf = conf
        self._num_executors = num_executors
        self._total_executor_cores = total_executor_cores
        self._executor_cores = executor_cores

    def bellamy_detach(self) -> None:
        """Return once spark-submit has handed a cluster-mode driver to a standalone master.

        The provider would then poll the driver until it ends (its operator calls
        ``_start_driver_status_tracking`` whenever this flag is set); the driver id is noted
        by ``_process_spark_submit_log`` here instead.
        """
        self._should_track_driver_status = False

    def _process_spark_submit_log(self, itr: Any) -> None:
        from airflow_provider_bellamy.masking import mask_text

        tail: deque[str] = deque(maxlen=_LOG_TAIL_LINES)
        self.bellamy_log_tail = tail
        secrets = self.bellamy_secrets or []

        def tap(lines: Any) -> Any:
            for raw in lines:
                # the provider logs every line as is: an application echoing its arguments
                # or Spark printing its conf would put a credential in the task log
                line = mask_text(str(raw), secrets)
                tail.append(line.rstrip())
                if self.bellamy_app_id is None:
                    match = _APP_ID_RE.search(line)
                    if match:
                        self.bellamy_app_id = match.group(1)
                if self.bellamy_driver_id is None:
                    match = _DRIVER_ID_RE.search(line)
                    if match:
                        self.bellamy_driver_id = match.group(1)
                yield line

        super()._process_spark_submit_log(tap(itr))

    def masked_args(self, args: Sequence[Any]) -> list[str]:
        """``args`` with every credential masked, one entry per argument (the list stays a list: an
        argument with a space is still one). Beyond the provider's keys containing ``secret`` or
        ``password`` this masks tokens (``oauthToken``, ``--api-token``), cloud account/access keys
        and ``user:password@`` in URLs, and hands each value to Airflow's secrets masker."""
        from airflow_provider_bellamy.masking import find_secrets, mask_text, register_secrets

        texts = [str(a) for a in args]
        secrets = find_secrets(texts)
        if secrets:
            register_secrets(secrets)
            self.bellamy_secrets = list(dict.fromkeys([*(self.bellamy_secrets or []), *secrets]))
        return [mask_text(a, self.bellamy_secrets or []) for a in texts]

    def _mask_cmd(self, connection_cmd: str | list[str]) -> str:
        """The provider logs the command and its failure output through this method: the
        provider's masking over ``masked_args``."""
        return super()._mask_cmd(
            self.masked_args([connection_cmd] if isinstance(connection_cmd, str) else connection_cmd)
        )

    def bellamy_log_text(self) -> str:
        """The last lines spark-submit printed, secrets masked."""
        return "\n".join(self._mask_cmd([line]) for line in (self.bellamy_log_tail or ()))

    # -- what the cluster reports -----------------------------------------------------------------

    def master_webui(self) -> str:
        """A standalone master's web UI: the connection's ``master-webui`` extra, else host:8080.

        Read once per hook (it is asked before the launch, while the application runs and after
        it): each read is a connection lookup, maybe a secrets backend's round trip. A lookup that
        failed is not kept, so a later call asks again."""
        if self._bellamy_webui is not None:
            return self._bellamy_webui
        try:
            conn_extra = self.get_connection(self._conn_id).extra_dejson or {}
        except Exception:
            conn_extra = None
        web = (conn_extra or {}).get("master-webui") or (conn_extra or {}).get("master_webui")
        if web:
            url = validate_endpoint(web, f"connection {self._conn_id!r} extra master-webui")
        else:
            host = str(self._connection["master"]).replace("spark://", "").split(",")[0].rsplit(":", 1)[0]
            url = f"http://{host}:8080"
        if conn_extra is not None:
            self._bellamy_webui = url
        return url

    def master_status_hook(self, timeout_s: float = 5.0) -> JobStatusHook:
        """The standalone master's ``/json/`` endpoint."""
        return JobStatusHook("spark-master", self.master_webui(), timeout_s=timeout_s)

    def start_grant_sampler(self, executor_cores: int) -> MasterGrantSampler:
        """Samples, while the application runs, the executors the standalone master grants it
        (client deploy mode: the application id is in spark-submit's own log)."""
        master = self.master_status_hook()
        return MasterGrantSampler(
            fetch=lambda: master.get_json("/json/"),
            app_id=lambda: self.bellamy_app_id,
            executor_cores=executor_cores,
        ).start()

    def observe_application(
        self,
        app_id: str | None,
        *,
        name: str | None,
        requested: int,
        executor_cores: int,
        history_server_url: str | None = None,
        standalone: bool = False,
        sampler: MasterGrantSampler | None = None,
        event_log: EventLogPlace | None = None,
        fallback: ObservedRun,
    ) -> ObservedRun:
        """A finished application's own timing when Spark reports it: a history server's attempt
        and executor add times, else the standalone master's duration split by the sampled
        grants, else its event log in ``event_log`` (client deploy mode: the driver wrote it
        on this machine), else ``fallback`` (spark-submit's wall time).

        The job has ended when this is called: a source whose answer does not parse (a partial
        or malformed figure) is passed over for the next one, logged and named in the returned
        ``source``; failing the task here would make a retry run the whole job again. An id of
        ours that is malformed is no answer of the cluster: refused (``InvalidInputError``) before
        any source is asked (the operator checks ``history_server_url`` and the master's web UI
        before it launches; ids come from spark-submit's log)."""
        if app_id is not None:
            validate_spark_id(app_id)
        unread: list[str] = []
        if history_server_url and app_id:
            history = JobStatusHook("spark-history", history_server_url, timeout_s=5.0)
            # the history server picks the event log up on its next scan
            found = history.poll(
                lambda: spark_history_attempt_steps(app_id, history.where),
                done=lambda r: r is not None,
                polls=10,
                interval_s=1.0,
                unread=unread,
            )
            if found is not None:
                attempt, executors = found
                observed = self._read_figures(
                    history.where,
                    unread,
                    lambda: ObservedRun.of(
                        float(attempt["duration"]) / 1000.0,
                        timing_from_history(attempt, executors, executor_cores),
                        f"history server ({app_id})",
                        requested,
                    ),
                )
                if observed is not None:
                    return _noting(observed, unread)
        if standalone:
            master = self.master_status_hook()
            # the master moves the application to completedapps a moment after it exits
            app = master.poll(
                lambda: spark_master_completed_app_steps(app_id, name, master.where),
                done=lambda r: r is not None,
                polls=10,
                interval_s=0.5,
                give_up_when_unreachable=True,
                unread=unread,
            )
            if app is not None:

                def from_master() -> ObservedRun:
                    duration_s = float(app["duration"]) / 1000.0
                    timing = sampler.timing(duration_s) if sampler is not None else None
                    return ObservedRun.of(
                        duration_s, timing, f"standalone master ({app.get('id')})", requested
                    )

                observed = self._read_figures(master.where, unread, from_master)
                if observed is not None:
                    return _noting(observed, unread)
        if event_log is not None:
            where = f"the event log in {event_log.directory}"
            try:
                observed = self.read_event_log(
                    event_log, app_id, requested=requested, executor_cores=executor_cores
                )
                return _noting(observed, unread)
            except EventLogUnreadableError as exc:
                note = f"{where} not read: {exc}"
                self.log.warning("Bellamy: %s; the runtime comes from the next source", note)
                unread.append(note)
        return _noting(fallback, unread)

    def event_log_setting(self, conf: dict[str, Any]) -> EventLogSetting:
        """Event logging as ``conf`` sets it, else as the properties file spark-submit reads
        (``--properties-file``, ``spark-defaults.conf`` of ``SPARK_CONF_DIR`` or the Spark home):
        ``--conf`` overrides that file, so a log the user has there must not be redirected."""
        keys = ("spark.eventLog.enabled", "spark.eventLog.dir")
        files = self._spark_properties_files()
        # spark-submit reads one properties file; --conf entries override its keys one by one
        merged = {**(_read_properties(files[0]) if files else {}), **conf}
        where = "conf" if any(k in conf for k in keys) else (str(files[0]) if files else "nowhere")
        return EventLogSetting(
            _spark_bool(merged.get("spark.eventLog.enabled")), _text(merged.get("spark.eventLog.dir")), where
        )

    def _spark_properties_files(self) -> list[Path]:
        """The properties files spark-submit may read, the ones that exist."""
        env = {**os.environ, **(self._env_vars or {})}
        found: list[Path] = []
        if self._properties_file:
            found.append(Path(self._properties_file))
        homes = [env.get("SPARK_CONF_DIR"), env.get("SPARK_HOME") and f"{env['SPARK_HOME']}/conf"]
        binary = shutil.which(str(self._connection.get("spark_binary") or "spark-submit"))
        if binary:
            homes.append(str(Path(os.path.realpath(binary)).parent.parent / "conf"))
        found += [Path(h) / "spark-defaults.conf" for h in homes if h]
        return [p for p in dict.fromkeys(found) if p.is_file()]

    def read_event_log(
        self, place: EventLogPlace, app_id: str | None, *, requested: int, executor_cores: int
    ) -> ObservedRun:
        """The application's figures from its event log in ``place`` (a single file or a rolling
        log's directory, plain or zstd, by application id; in a temporary directory, without an
        id, the one log there: spark-submit may log none). Raises ``EventLogUnreadableError``
        naming why when there is none, it is compressed with a codec other than zstd, its zstd
        stream does not decode, or it is not whole; its content is never logged or quoted (it
        holds the application's conf, credentials included)."""
        if app_id is None and not place.temporary:
            raise EventLogUnreadableError("spark-submit logged no application id to find its log by")
        try:
            files = event_log_files(place.directory, app_id)
            duration_s, timing = timing_from_event_log(_lines_of(files), executor_cores, app_id=app_id)
        except OSError as exc:
            raise EventLogUnreadableError(f"cannot read it ({type(exc).__name__}: {exc.strerror})") from None
        except UnicodeDecodeError as exc:
            # a codec Spark names by its class rather than by a short name we know
            raise EventLogUnreadableError(f"it is not UTF-8 text (byte {exc.start} of a line)") from None
        name = app_id or files[0].name.removesuffix(_INPROGRESS)
        return ObservedRun.of(duration_s, timing, f"event log ({name})", requested)

    def _read_figures(
        self, where: str, unread: list[str], read: Callable[[], ObservedRun]
    ) -> ObservedRun | None:
        """``read()``; None, logged and noted in ``unread``, when the answer's figures do not
        parse or are not a duration."""
        try:
            observed = read()
            if not math.isfinite(observed.runtime_s) or observed.runtime_s <= 0:
                raise ValueError(f"runtime {observed.runtime_s!r} s")
            return observed
        except UNPARSED_ANSWER_ERRORS as exc:
            note = unparsed_answer_note(where, exc)
            self.log.warning("Bellamy: %s; the runtime comes from the next source", note)
            unread.append(note)
            return None

    def driver_status(self, driver_id: str, unread: list[str] | None = None) -> JobStatus | None:
        """A standalone cluster-mode driver's status once it has ended and the master lists its
        application's duration (a moment after the driver ends); the last answer, or None. An
        answer that does not parse is named in ``unread``."""
        master = self.master_status_hook(timeout_s=10.0)
        return master.poll(
            lambda: status_steps("spark-master", driver_id, master.endpoint),
            done=lambda s: s is not None and s.terminal and s.runtime_s is not None,
            polls=20,
            interval_s=0.5,
            unread=unread,
        )


def _noting(observed: ObservedRun, unread: Sequence[str]) -> ObservedRun:
    """``observed`` with the sources passed over named in its ``source``."""
    if not unread:
        return observed
    return dataclasses.replace(observed, source=f"{observed.source} ({'; '.join(unread)})")


def event_log_files(directory: Path, app_id: str | None) -> list[Path]:
    """The files of ``app_id``'s event log in ``directory``, in order: ``<id>`` (``_<attempt>``,
    ``.inprogress`` while or when its driver did not finish it), or a rolling log's
    ``eventlog_v2_<id>/events_<n>_<id>``; with no id, the one log in ``directory``. Raises
    ``EventLogUnreadableError`` when there is none (or, with no id, several) or it is compressed
    with a codec other than zstd (``.lz4``, ``.lzf``, ``.snappy``)."""

    def of_app(name: str) -> bool:
        if app_id is None:
            return not name.startswith(".")  # Hadoop's .crc checksums
        return name == app_id or name.startswith((f"{app_id}.", f"{app_id}_"))

    try:
        found = [p for p in directory.iterdir() if of_app(p.name.removeprefix("eventlog_v2_"))]
        # the latest attempt's (a retried YARN attempt writes <id>_<n>)
        chosen = max(found, key=lambda p: p.stat().st_mtime) if found else None
    except OSError as exc:
        raise EventLogUnreadableError(f"cannot list it ({type(exc).__name__}: {exc.strerror})") from None
    if chosen is None:
        raise EventLogUnreadableError(f"no event log of {app_id or 'the application'} in it")
    if app_id is None and len(found) > 1:
        raise EventLogUnreadableError(f"{len(found)} logs in it and no application id to tell them apart")
    if chosen.is_dir():
        numbered = []
        for part in chosen.iterdir():
            match = re.match(r"events_(\d+)_", part.name)
            if match:
                numbered.append((int(match.group(1)), part))
        files = [part for _, part in sorted(numbered)]
    else:
        files = [chosen]
    if not files:
        raise EventLogUnreadableError(f"{chosen.name} holds no events file")
    for part in files:
        codec = _codec_of(part)
        if codec in _UNREAD_CODECS:
            raise EventLogUnreadableError(
                f"{part.name} is compressed ({codec}, spark.eventLog.compression.codec): no {codec} "
                f"reader here (zstd, Spark's default, is read)"
            )
    return files


def _codec_of(part: Path) -> str | None:
    """The codec an event log file's name ends in (``<id>.zstd``, ``events_1_<id>.lz4.inprogress``)."""
    name = part.name.removesuffix(_INPROGRESS)
    codec = name.rsplit(".", 1)[-1] if "." in name else None
    return codec if codec in (*_UNREAD_CODECS, _ZSTD) else None


def _lines_of(files: Sequence[Path]) -> Iterator[str]:
    """The lines of ``files`` in order, each read as a stream (a big application's log is large)."""
    for part in files:
        if _codec_of(part) == _ZSTD:
            yield from _zstd_lines(part)
        else:
            with part.open(encoding="utf-8") as handle:
                yield from handle


def _zstd_lines(part: Path) -> Iterator[str]:
    """A zstd event log's lines, decompressed as read. Spark writes several frames to one file
    (read across them). A stream cut off mid-frame ends where its data ends (the events then say
    what is missing); one that does not decode raises ``EventLogUnreadableError``."""
    try:
        # here, not at the top: the operators' import (DAG parsing) does not pay for it
        import zstandard
    except ImportError:
        raise EventLogUnreadableError(
            f"{part.name} is compressed (zstd) and zstandard is not installed (the [spark] extra brings it)"
        ) from None
    with part.open("rb") as raw:
        reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=False)
        try:
            yield from io.TextIOWrapper(io.BufferedReader(reader), encoding="utf-8")
        except zstandard.ZstdError as exc:
            # libzstd's message names the fault (e.g. "Unknown frame descriptor"), never the data
            raise EventLogUnreadableError(f"{part.name} is no valid zstd stream ({exc})") from None


def _spark_bool(value: Any) -> bool | None:
    if value is None:
        return None
    return str(value).strip().lower() == "true"


def _text(value: Any) -> str | None:
    return None if value is None else str(value).strip() or None


def _read_properties(path: Path) -> dict[str, str]:
    """A Java properties file as spark-submit reads ``spark-defaults.conf`` (``key value``,
    ``key=value``; ``#``/``!`` comments). Unreadable: empty (spark-submit would fail on it)."""
    props: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return props
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        match = re.match(r"([^\s=:]+)\s*[=:\s]\s*(.*)$", line)
        if match:
            props[match.group(1)] = match.group(2).strip()
    return props
