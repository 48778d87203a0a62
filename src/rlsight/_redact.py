"""What counts as content or a secret, and how it is kept out of every file rlsight writes.

One module so the span attributes, recorded exceptions, the Perfetto timeline and the run's
``manifest.json`` apply the same rules: a key that names content (a prompt, a completion, a
chat message, a token, a key) has its text replaced by ``"<redacted>"``; free text that rlsight
cannot classify by key (an exception message, a command line) is scrubbed of ``key=value``
pairs whose key names a secret and of well-known credential shapes.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Final

__all__ = ["REDACTED", "REDACTED_KEYS", "is_content", "is_content_key", "scrub", "scrub_argv"]

REDACTED: Final = "<redacted>"

#: Last dotted segments (lower-cased) whose text values are replaced: content, not counts.
REDACTED_KEYS: Final = frozenset({
    "prompt", "prompts", "completion", "completions", "token", "tokens", "secret", "secrets",
    "password", "passwords", "api_key", "api_keys", "api-key", "api-keys", "apikey", "apikeys",
    "authorization", "authorizations", "messages", "text", "texts", "content", "contents",
    "response", "responses", "system_instructions",
})
#: OpenTelemetry GenAI keys that hold conversation content, and the prefixes of the older
#: indexed form (``gen_ai.prompt.0.content``).
_GENAI_CONTENT: Final = frozenset({
    "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
    "gen_ai.prompt", "gen_ai.completion",
})
_GENAI_PREFIXES: Final = ("gen_ai.prompt.", "gen_ai.completion.")
_SECRET_WORD: Final = r"(?:api[_-]?key|apikey|[a-z0-9]*[_-]?token|secret|password|passwd|authorization)"
#: The key may end in a quote: a dict in a message, as JSON or Python's repr (``"api_key": "x"``).
_KEY_VALUE: Final = re.compile(
    rf"(?i)(?P<key>[\w.-]*{_SECRET_WORD}[\"']?)(?P<sep>\s*[=:]\s*|=)(?P<value>\"[^\"]*\"|'[^']*'|[^\s,;&'\"]+)")
_CREDENTIALS: Final = re.compile(
    r"(?i)\bbearer\s+[\w.~+/=-]+"  # an Authorization header value
    r"|\b(?:sk|hf|ghp|gho|github_pat|xox[abp]|glpat)[-_][A-Za-z0-9_-]{16,}"  # vendor token shapes
    r"|(?<=://)[^/\s:@]+:[^/\s@]+(?=@)"  # user:password in a URL
)


@functools.lru_cache(maxsize=4096)
def is_content_key(key: str) -> bool:
    """Whether a value under attribute ``key`` (dotted, as written) is content to redact."""
    low = key.lower()
    if low in _GENAI_CONTENT or low.startswith(_GENAI_PREFIXES):
        return True
    last = low.rsplit(".", 1)[-1]
    return last in REDACTED_KEYS or last.endswith(("_token", "-token"))


def is_content(value: object) -> bool:
    """Text that may carry user data; numbers (``prompts=8``, ``tokens=512``) are counts."""
    if isinstance(value, (str, bytes)):
        return True
    return isinstance(value, (list, tuple)) and any(isinstance(v, (str, bytes)) for v in value)


def scrub(text: str) -> str:
    """``text`` with secret-named ``key=value`` values and credential shapes redacted."""
    text = _CREDENTIALS.sub(REDACTED, text)
    return _KEY_VALUE.sub(lambda m: f"{m['key']}{m['sep']}{REDACTED}", text)


def scrub_argv(argv: Sequence[str]) -> list[str]:
    """A command line with secrets redacted: ``--hf-token=X``, ``--api-key X``, ``hf_...``."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag = arg.lstrip("-")
        if arg.startswith("-") and "=" not in arg and is_content_key(flag.replace("-", "_")):
            hide_next = True  # ``--hf-token VALUE``: the value is the next word
            out.append(arg)
            continue
        if arg.startswith("-") and "=" in arg:
            name, _, _value = flag.partition("=")
            if is_content_key(name.replace("-", "_")) or is_content_key(name):
                out.append(arg[: len(arg) - len(_value)] + REDACTED)
                continue
        out.append(scrub(arg))
    return out
