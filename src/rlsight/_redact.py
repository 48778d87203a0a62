"""What counts as content or a secret, and how it is kept out of every file rlsight writes.

One module so the span attributes, recorded exceptions, the Perfetto timeline and the run's
``manifest.json`` apply the same rules: a key that names content (a prompt, a completion, a
chat message, a token, a key) has its text replaced by ``"<redacted>"``; free text that rlsight
cannot classify by key (an exception message, a command line) is scrubbed of ``key=value``
pairs whose key names a secret, of the value after a secret-named flag in a command it prints,
and of well-known credential shapes.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Final

__all__ = [
    "REDACTED", "REDACTED_KEYS", "TOKENIZER_KEYS", "is_content", "is_content_key", "scrub", "scrub_argv",
]

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
#: What names a secret in a key, for the tests' oracle: one of the words of :data:`_KEY_WORD`
#: anywhere in it, or ``token`` at its end.
_SECRET_WORD: Final = (r"(?:api[_-]?key|apikey|[a-z0-9]*[_-]?token|secret|password|passwd|authorization"
                       r"|private[_-]?key|passphrase)")
#: A word that names a secret wherever it stands in a key (``aws_secret_access_key``,
#: ``SECRET_KEY``, ``password1``, ``passwords``, ``db_password_hash``: a password's hash can be
#: cracked offline), or ``token``, which names one only at the key's end (``hf_token``; not
#: ``tokens=512`` nor ``max_tokens``). The key may end in a quote, escaped or not: a dict in a
#: message, as JSON, as Python's repr or as JSON inside a JSON string (``{\"api_key\": ...}``).
#: Only the word is matched, and the rest of the key is read forward from it (:data:`_KEY_REST`)
#: and skipped: a pattern that also matched the words before it would try every start in a long
#: run of word characters, quadratic time on a message holding a long blob. The value after it
#: is found by :func:`_value_end`, which no regular expression can do: it may be a nested list.
_KEY_WORD: Final = re.compile(
    r"(?i)api[_-]?key|apikey|(?P<token>token)|secret|password|passwd|(?P<auth>authorization)"
    r"|private[_-]?key|passphrase")
_KEY_REST: Final = re.compile(r"[\w-]*")
_SEPARATOR: Final = re.compile(r"(?:\\*[\"'])?\s*[=:]\s*")
#: A string written inside one or more other strings: its quote escaped once (``\"``, JSON inside
#: a JSON string), three times (``\\\"``, inside two) or more.
_ESCAPED_QUOTE: Final = re.compile(r"\\+[\"']")
#: A command-line flag in a message, at the start of a word or of a quoted list item:
#: ``Command '['vllm', 'serve', '--api-key', 'abc']'`` (a ``CalledProcessError``), or
#: ``Command 'vllm serve --api-key abc'``. A secret-named flag's value is the next item or word.
_FLAG: Final = re.compile(r"(?:(?<=[\s'\"])|^)--?(?=[A-Za-z])")
#: After a quoted flag: the quote that closes it, then the comma before the next item.
_ITEM_SEPARATOR: Final = re.compile(r"\s*,\s*")
_WORD_SEPARATOR: Final = re.compile(r"[ \t]+(?!-)")
#: The last part of a key that measures a secret rather than holding it: ``password_len=12`` keeps
#: its number (only a number: ``password_len=abc`` is redacted all the same).
_MEASURES: Final = frozenset({
    "len", "length", "count", "size", "chars", "bytes", "bits", "rounds", "min", "max",
})
_PART: Final = re.compile(r"[_-]")
#: A value that is not quoted nor bracketed (``token=abc``, ``{'num_token': 3}``): up to the next
#: separator, less the closing brackets before it, which belong to the text around it.
_BARE_VALUE: Final = re.compile(r"[^\s,;&'\"]+")
#: A string prefix in Python's repr (``b'...'``, ``rb"..."``).
_PREFIX: Final = re.compile(r"[bBrRuUfF]{0,2}(?=['\"])")
_OPEN: Final = {"[": "]", "{": "}", "(": ")"}
#: ``*_token`` keys that are a tokenizer's special-token vocabulary, never a credential:
#: ``{'eos_token': '</s>'}`` in a tokenizer's error keeps what it says.
TOKENIZER_KEYS: Final = frozenset({
    "eos_token", "bos_token", "pad_token", "unk_token", "sep_token", "cls_token", "mask_token",
})
#: HTTP authentication schemes (lower-cased): after an ``Authorization`` key, a value that is one
#: of these is a scheme, and the credential after it is redacted with it (``Basic dXNlcjpwYXNz``).
AUTH_SCHEMES: Final = frozenset({
    "basic", "bearer", "token", "digest", "negotiate", "ntlm", "aws4-hmac-sha256", "hoba",
    "mutual", "vapid", "scram-sha-1", "scram-sha-256", "dpop", "gnap", "oauth", "apikey",
})
#: The credential after a scheme: a word (a token68, or a first ``name=value`` whose value may be
#: quoted), then any ``, name=value`` parameters (Digest's ``response="..."``, AWS's
#: ``Signature=...``). Each part starts with a fixed character, so no backtracking grows with input.
_AUTH_CREDENTIAL: Final = re.compile(
    r"[ \t]+[^\s,;'\"]+(?:\"(?:[^\"\\]|\\.)*\")?"
    r"(?:[ \t]*,[ \t]*[\w-]+=(?:\"(?:[^\"\\]|\\.)*\"|[^\s,'\"]*))*")
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
    if last in TOKENIZER_KEYS:
        return False
    return last in REDACTED_KEYS or last.endswith(("_token", "-token")) or _names_secret(last)


def is_content(value: object) -> bool:
    """Text that may carry user data; numbers (``prompts=8``, ``tokens=512``) are counts."""
    if isinstance(value, (str, bytes)):
        return True
    return isinstance(value, (list, tuple)) and any(isinstance(v, (str, bytes)) for v in value)


def scrub(text: str) -> str:
    """``text`` with secret-named ``key=value`` values and credential shapes redacted.

    A value is redacted whole: a quoted string (``b'...'``, ``\\"...\\"`` included), a list,
    tuple or dict (nested ones too), or a bare word up to the next separator.
    """
    text = _scrub_flags(text)
    out: list[str] = []
    pos = search = 0
    while (m := _KEY_WORD.search(text, search)) is not None:
        key_end = m.end() if m["token"] else _KEY_REST.match(text, m.end()).end()  # type: ignore[union-attr]
        sep = _SEPARATOR.match(text, key_end)
        if sep is None:
            search = key_end
            continue
        start = sep.end()
        end = _value_end(text, start)
        if end is None:
            out.append(text[pos:start])
            end = start
        elif ((m["token"] and _tokenizer_key(text, m.start()))
              or _measure(text[m.end():key_end], text[start:end])):
            if end < len(text) or not _opens(text, start):
                out.append(text[pos:end])
            else:  # a value left open runs to the end: kept, it would hide what follows
                out.append(text[pos:start])
                end = start
        else:
            if m["auth"] and text[start:end].lower() in AUTH_SCHEMES:
                credential = _AUTH_CREDENTIAL.match(text, end)
                end = credential.end() if credential else end
            out.append(text[pos:start] + REDACTED)
        pos = search = end
    out.append(text[pos:])
    return _CREDENTIALS.sub(REDACTED, "".join(out))  # last: a key's credential is redacted whole first


def _scrub_flags(text: str) -> str:
    """``text`` with the value after each secret-named flag redacted: the next list item after
    ``'--api-key', `` (a quoted flag), or the next word after ``--api-key `` (a bare one)."""
    out: list[str] = []
    pos = search = 0
    while (m := _FLAG.search(text, search)) is not None:
        name_end = _KEY_REST.match(text, m.end()).end()  # type: ignore[union-attr]
        search = name_end
        if not _names_secret(text[m.end():name_end]):
            continue
        quotes = m.start()
        if quotes > 0 and text[quotes - 1] in "'\"":
            quotes -= 1
            while quotes > 0 and text[quotes - 1] == "\\":
                quotes -= 1
        closing = text[quotes:m.start()]  # the quote, escaped as the opening one is
        if closing and text.startswith(closing, name_end):  # a list item: '--api-key', 'X'
            sep = _ITEM_SEPARATOR.match(text, name_end + len(closing))
        else:  # a word: --api-key X, also first in a quoted command ('--api-key X')
            sep = _WORD_SEPARATOR.match(text, name_end)
        if sep is None or (end := _value_end(text, sep.end())) is None:
            continue
        out.append(text[pos:sep.end()] + REDACTED)
        pos = search = end
    out.append(text[pos:])
    return "".join(out)


def _names_secret(name: str) -> bool:
    """Whether ``name`` (a flag's ``api-key``, a key's last segment ``client_secret``) names a
    secret: a secret word anywhere but a measure (``password_len``), or ``token`` at its end."""
    key = name.lower().replace("-", "_")
    if key.endswith("token"):
        return key not in TOKENIZER_KEYS
    m = _KEY_WORD.search(key)
    return m is not None and not m["token"] and _PART.split(key)[-1] not in _MEASURES


def _measure(suffix: str, value: str) -> bool:
    """Whether a key whose secret word is followed by ``suffix`` (``_len``) measures the secret
    and ``value`` is a number: ``password_len=12`` is kept."""
    return bool(suffix) and _PART.split(suffix)[-1].lower() in _MEASURES and value.isdigit()


def _tokenizer_key(text: str, token_at: int) -> bool:
    """Whether the key whose ``token`` starts at ``token_at`` is a special token's
    (``eos_token``, ``mask_token``; ``tokenizer.eos_token``, not ``my_eos_token``). Looks back
    at most the longest such name, so a long run of word characters costs nothing."""
    longest = max(map(len, TOKENIZER_KEYS)) - len("token")
    start = token_at
    while start > 0 and token_at - start <= longest and (
            text[start - 1].isalnum() or text[start - 1] in "_-"):
        start -= 1
    return text[start:token_at + 5].lower() in TOKENIZER_KEYS


def _opens(text: str, start: int) -> bool:
    """Whether the value at ``start`` is a string or bracket (which may be left open)."""
    return (_ESCAPED_QUOTE.match(text, start) is not None or _PREFIX.match(text, start) is not None
            or (start < len(text) and text[start] in _OPEN))


def _value_end(text: str, start: int) -> int | None:
    """Where the value starting at ``start`` ends; ``None`` where there is none. A string or
    bracket left open (a message cut short) runs to the end of the text."""
    if _ESCAPED_QUOTE.match(text, start):  # JSON inside a JSON string: \"...\", \\\"...\\\"
        return _escaped_string_end(text, start)
    prefix = _PREFIX.match(text, start)
    if prefix is not None:
        return _string_end(text, prefix.end())
    if start < len(text) and text[start] in _OPEN:
        return _bracket_end(text, start)
    bare = _BARE_VALUE.match(text, start)
    if bare is None:
        return None
    value = bare[0].rstrip(")]}")  # stripped, not matched lazily: no quadratic time on ')))...'
    return start + len(value) if value else None


def _string_end(text: str, start: int) -> int:
    """The end of the quoted string at ``start`` (backslash escapes skipped)."""
    quote, i, n = text[start], start + 1, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
        elif c == quote:
            return i + 1
        else:
            i += 1
    return n


def _escaped_string_end(text: str, start: int) -> int:
    """The end of the string at ``start`` written inside other strings, its quote escaped by
    ``k`` backslashes (``\\"`` in JSON inside a JSON string: ``k`` is 1; 3 one level deeper).
    Inside it, a quote of its own text is escaped ``2k + 1`` times and a backslash of its own
    text is ``2k + 2`` backslashes, so the quote that closes it follows a run of ``k`` backslashes
    modulo ``2k + 2``; a quote escaped fewer than ``k`` times closes a string around it, so this
    one ended too. Each run is counted once: linear time."""
    k = start
    while text[k] == "\\":
        k += 1
    quote, k, i = text[k], k - start, k + 1
    while (j := text.find(quote, i)) != -1:
        run = j
        while run > i and text[run - 1] == "\\":
            run -= 1
        if j - run < k or (j - run) % (2 * k + 2) == k:
            return j + 1
        i = j + 1
    return len(text)


def _bracket_end(text: str, start: int) -> int:
    """The end of the list, tuple or dict at ``start``, nested ones and quoted strings in it
    (whose brackets do not count) included."""
    closers = [_OPEN[text[start]]]
    i, n = start + 1, len(text)
    while i < n and closers:
        c = text[i]
        if c in "'\"":
            i = _string_end(text, i)
            continue
        if c == "\\":
            run = i
            while run < n and text[run] == "\\":
                run += 1
            if run < n and text[run] in "'\"":
                i = _escaped_string_end(text, i)
            else:  # an escaped character (``\\]``) is no bracket
                i = run + 1 if (run - i) % 2 else run
            continue
        if c in _OPEN:
            closers.append(_OPEN[c])
        elif c == closers[-1]:
            closers.pop()
        i += 1
    return i if not closers else n


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
