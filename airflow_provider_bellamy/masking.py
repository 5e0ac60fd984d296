"""Secrets in submission commands, log lines and error messages: found, masked, and handed to
Airflow's secrets masker.

A ``flink run`` or ``spark-submit`` command carries credentials in three shapes:

* ``key=value`` settings whose key names a secret (``-D s3.secret-key=…``,
  ``--conf spark.kubernetes.authenticate.submission.oauthToken=…``,
  ``fs.azure.account.key.<account>.dfs.core.windows.net=…``, ``--password=…``);
* a flag followed by its value (``--password …``, ``--api-token …``);
* a URL with a password in it (``https://user:pw@host``, also without the scheme as in
  ``flink run -m user:pw@host:8081``).

The Spark provider masks only keys containing ``secret`` or ``password``. Everything found here
is replaced by ``***`` in what the Bellamy operators log or push to XCom, and registered with
Airflow's masker (``airflow.sdk.log.mask_secret``, which also tells the task's supervisor) so
that any later log line echoing the value — a client's error output, an exception — is redacted
too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

MASK = "***"

# Names of settings and flags whose value is a credential. Deliberately broader than the Spark
# provider's "secret|password": cloud keys and tokens are credentials too.
SENSITIVE_NAME = (
    r"secret|passw(?:or)?d|pwd|token|credential|private[._-]?key|api[._-]?key|access[._-]?key"
    r"|account[._-]?key|(?<![a-z])sas(?![a-z])|authori[sz]ation"
)
_SENSITIVE_NAME_RE = re.compile(SENSITIVE_NAME, re.IGNORECASE)
# key=value inside one argument or log token; the value runs to the next whitespace (or quote).
_ASSIGNMENT_RE = re.compile(
    rf"(?P<key>[^\s=]*(?:{SENSITIVE_NAME})[^\s=]*)=(?P<value>\"[^\"]*\"|'[^']*'|[^\s\"']+)",
    re.IGNORECASE,
)
# One argument that is a whole setting: its value is the rest of the argument, spaces included
# (``--conf "spark.db.secret=two words"`` reaches spark-submit as one argument).
_WHOLE_ASSIGNMENT_RE = re.compile(
    rf"(?P<key>[^\s=]*(?:{SENSITIVE_NAME})[^\s=]*)=(?P<value>.+)", re.IGNORECASE | re.DOTALL
)
# --flag value (only dashed flags: a bare word before a space is prose, not a setting).
_FLAG_RE = re.compile(
    rf"(?<!\S)(?P<flag>--?[\w.-]*(?:{SENSITIVE_NAME})[\w.-]*)(?P<gap>\s+)(?P<value>(?!-)[^\s\"']+)",
    re.IGNORECASE,
)
# user:password@ in a URL, with or without a scheme.
_USERINFO_RE = re.compile(r"(?P<user>(?:[a-z][a-z0-9+.-]*://)?[^\s/:@]+):(?P<value>[^\s/@]+)@", re.IGNORECASE)


def is_sensitive_name(name: str) -> bool:
    """Whether a setting or flag with this name holds a credential."""
    return bool(_SENSITIVE_NAME_RE.search(name))


def _unquote(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'" else value


def find_secrets(args: Sequence[str] | str) -> list[str]:
    """The credential values in an argument list (or one text), in order, without duplicates."""
    items = [args] if isinstance(args, str) else [str(a) for a in args]
    found: list[str] = []
    for i, item in enumerate(items):
        whole = None if isinstance(args, str) else _WHOLE_ASSIGNMENT_RE.fullmatch(item)
        if whole:
            found.append(_unquote(whole.group("value")))
        else:
            found.extend(_unquote(m.group("value")) for m in _ASSIGNMENT_RE.finditer(item))
        for match in _FLAG_RE.finditer(item):
            found.append(match.group("value"))
        for match in _USERINFO_RE.finditer(item):
            found.append(match.group("value"))
        # an argument list: "--password" then the value as the next argument
        if (
            not isinstance(args, str)
            and item.startswith("-")
            and "=" not in item
            and is_sensitive_name(item)
            and i + 1 < len(items)
            and not items[i + 1].startswith("-")
        ):
            found.append(items[i + 1])
    return list(dict.fromkeys(v for v in found if _could_be_secret(v)))


def _could_be_secret(value: str) -> bool:
    # A flag's switch or a count is not a credential, and handing "true" or "1" to Airflow's
    # masker would redact it in every later log line.
    text = value.strip()
    return len(text) >= 4 and text != MASK and text.lower() not in _NOT_SECRETS and not text.isdigit()


_NOT_SECRETS = frozenset({"true", "false", "none", "null", "yes", "no", "enabled", "disabled"})


def mask_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every credential replaced by ``***``: the shapes above, and ``secrets``."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    text = _ASSIGNMENT_RE.sub(lambda m: f"{m.group('key')}={MASK}", text)
    text = _FLAG_RE.sub(lambda m: f"{m.group('flag')}{m.group('gap')}{MASK}", text)
    return _USERINFO_RE.sub(lambda m: f"{m.group('user')}:{MASK}@", text)


def mask_args(args: Sequence[str]) -> list[str]:
    """An argument list with every credential value replaced by ``***`` (same length)."""
    secrets = find_secrets(args)
    return [mask_text(str(a), secrets) for a in args]


def register_secrets(secrets: Iterable[str]) -> None:
    """Hand values to Airflow's secrets masker (task process and supervisor), so that every later
    log line containing one is redacted. Outside a task it only masks this process's logs."""
    values = [s for s in secrets if s and s != MASK]
    if not values:
        return
    from airflow.sdk.log import mask_secret

    for value in values:
        mask_secret(value)
