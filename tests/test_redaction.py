"""Content and secrets stay out of every file rlsight writes: spans, exceptions, timeline, manifest.

docs/reliability.md names these tests for "what is redacted".
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from rlsight._redact import (
    _CREDENTIALS,
    _SECRET_WORD,
    AUTH_SCHEMES,
    REDACTED,
    is_content_key,
    scrub,
    scrub_argv,
)
from rlsight.cli import EXIT_OK, main
from rlsight.spans import span
from rlsight.store import read_spans
from rlsight.testing import capture_telemetry

SECRET = "hf_abcdefghijklmnopqrstuvwxyz0123"

CONTENT_KEYS = [
    "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
    "gen_ai.prompt.0.content", "gen_ai.completion.0.content", "messages", "text", "content",
    "response", "hf_token", "access_token", "api-key", "apiKey", "prompt", "api_key",
    # the plurals docs/span-groups.md promises ("plurals too"); these leaked before
    "texts", "contents", "responses", "apiKeys", "api-keys", "my.passwords",
]


@pytest.mark.parametrize("key", CONTENT_KEYS)
def test_a_content_key_is_redacted_in_the_store(key: str, run_dir: Path) -> None:
    with capture_telemetry(run_dir=run_dir), span("generation", "rl.test.s", **{key: SECRET}):
        pass
    (record,) = read_spans(run_dir).spans
    full = key if "." in key else "rl." + key
    assert record.attributes[full] == REDACTED
    assert SECRET not in "".join(p.read_text() for p in run_dir.rglob("*.jsonl"))


def test_counts_under_content_like_keys_are_kept(run_dir: Path) -> None:
    with capture_telemetry(run_dir=run_dir), span("generation", "rl.test.s", tokens=512, prompts=8):
        pass
    (record,) = read_spans(run_dir).spans
    assert (record.attributes["rl.tokens"], record.attributes["rl.prompts"]) == (512, 8)


def test_an_exception_message_on_a_span_is_scrubbed(run_dir: Path) -> None:
    """The status, the exception event's message and its stack trace never hold the token."""
    with capture_telemetry(run_dir=run_dir), pytest.raises(PermissionError):
        with span("generation", "rl.test.fail"):
            raise PermissionError(f"login failed for token={SECRET} (Authorization: Bearer abc.def)")
    text = "".join(p.read_text() for p in (run_dir / "traces").glob("*.jsonl"))
    assert SECRET not in text and "abc.def" not in text
    (record,) = read_spans(run_dir).spans
    assert record.status_message.startswith("PermissionError: login failed for token=<redacted>")


def test_the_timeline_redacts_what_the_store_holds_raw(run_dir: Path, tmp_path: Path) -> None:
    """A value written through set_attribute (not redacted on the way in) is redacted in the trace."""
    with capture_telemetry(run_dir=run_dir), span("generation", "rl.test.s") as s:
        s.set_attribute("gen_ai.input.messages", SECRET)
    assert main(["timeline", str(run_dir), "-o", str(tmp_path / "t.json")]) == EXIT_OK
    trace = (tmp_path / "t.json").read_text()
    assert SECRET not in trace and json.loads(trace)["traceEvents"]


def test_the_manifest_holds_no_secret_from_argv_or_config(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import sys
        from rlsight import TelemetryConfig, setup_telemetry
        setup_telemetry(TelemetryConfig(
            run_dir=sys.argv[1], otlp_endpoint="https://user:pw{SECRET}@collector:4318",
            resource_attributes={{"deploy.api_key": "{SECRET}", "team": "rl"}})).shutdown(100)
    """)
    run_dir = tmp_path / "run"
    subprocess.run([sys.executable, "-c", script, str(run_dir), f"--hf-token={SECRET}",
                    "--api-key", SECRET, f"--note=key {SECRET}", "--steps", "3"], check=True)
    manifest = (run_dir / "manifest.json").read_text()
    assert SECRET not in manifest
    doc = json.loads(manifest)
    assert doc["argv"][2:] == ["--hf-token=<redacted>", "--api-key", "<redacted>",
                               "--note=key <redacted>", "--steps", "3"]
    assert doc["config"]["resource_attributes"] == {"deploy.api_key": REDACTED, "team": "rl"}


@pytest.mark.parametrize(("text", "expected"), [
    ("password: hunter2, next", "password: <redacted>, next"),
    ("GITHUB_TOKEN=ghp_x", "GITHUB_TOKEN=<redacted>"),
    ("curl -H 'Authorization: Bearer abc'", "curl -H 'Authorization: <redacted>'"),
    ("plain message with 3 tokens", "plain message with 3 tokens"),
    # a dict in an exception message, as JSON or as Python's repr: the key is quoted
    ('config {"api_key": "XYZ123", "n": 2}', 'config {"api_key": <redacted>, "n": 2}'),
    ("bad request {'hf_token': 'abc', 'model': 'm'}", "bad request {'hf_token': <redacted>, 'model': 'm'}"),
    ('{"password":"pw"}', '{"password":<redacted>}'),
    # the value whole, whatever its shape (each leaked all or part of the secret)
    ("{'db_password': b'hunter2'}", "{'db_password': <redacted>}"),
    ("{'api_token': ['abc123', 'def456']}", "{'api_token': <redacted>}"),
    ('{\\"api_key\\": \\"XYZ123\\"}', '{\\"api_key\\": <redacted>}'),
    ("{'token': {'value': 'abc'}}", "{'token': <redacted>}"),
    ("{'token': [['a]'], {'b': ('c',)}], 'n': 1}", "{'token': <redacted>, 'n': 1}"),
    ("api_key: 'a\\'b' rest", "api_key: <redacted> rest"),
    # a bare value leaves the brackets around it
    ("{'num_token': 3}", "{'num_token': <redacted>}"),
    ("f(token=abc) and {'a': {'secret': x}}", "f(token=<redacted>) and {'a': {'secret': <redacted>}}"),
    ("password=ab}cd", "password=<redacted>"),
    # a tokenizer's special tokens are vocabulary, not credentials
    ("{'bos_token': '<s>', 'eos_token': '</s>', 'pad_token': '<pad>'}",
     "{'bos_token': '<s>', 'eos_token': '</s>', 'pad_token': '<pad>'}"),
    ("{'eos_token': '</s>', 'hf_token': 'abc'}", "{'eos_token': '</s>', 'hf_token': <redacted>}"),
    # an Authorization value is a scheme and its credential: both are redacted (the scheme alone was)
    ("Authorization: Basic dXNlcjpwYXNz next", "Authorization: <redacted> next"),
    ("Authorization: Token 0123abcd", "Authorization: <redacted>"),
    ("authorization=Bearer abc.def.ghi", "authorization=<redacted>"),
    ('Authorization: Digest username="Mufasa", realm="a@b", response="6629fae", opaque="5c" rest',
     "Authorization: <redacted> rest"),
    ("Authorization: AWS4-HMAC-SHA256 Credential=AKIA/1/s3/aws4_request, "
     "SignedHeaders=host;x-amz-date, Signature=fe5f80f7 end", "Authorization: <redacted> end"),
    ("authorization: required, see docs", "authorization: <redacted>, see docs"),
    # a secret word anywhere in the key, not only at its end
    ("aws_secret_access_key=AKIAXX rest", "aws_secret_access_key=<redacted> rest"),
    ("SECRET_KEY=abc", "SECRET_KEY=<redacted>"),
    ("private_key: '-----BEGIN'", "private_key: <redacted>"),
    ("client_secret=abc", "client_secret=<redacted>"),
    ("password1=abc", "password1=<redacted>"),
    ("passwords=['a', 'b'] n=1", "passwords=<redacted> n=1"),
    ('secrets={"a": "b"}', "secrets=<redacted>"),
    ("db_password_hash=$2b$12$abc", "db_password_hash=<redacted>"),  # crackable offline: a secret
    ("secret_token=x", "secret_token=<redacted>"),
    # counts and a measure of a secret are kept: 'token' names a secret only at the key's end
    ("tokens=512, max_tokens: 1024, num_tokens=3", "tokens=512, max_tokens: 1024, num_tokens=3"),
    ("token_budget=1024 token_ids=[1, 2]", "token_budget=1024 token_ids=[1, 2]"),
    ("password_len=12 password_min_length: 8", "password_len=12 password_min_length: 8"),
    ("password_len=abc", "password_len=<redacted>"),  # only a number is a measure
    # JSON inside two JSON strings: the quotes are escaped three times
    (r'{\\\"api_key\\\": \\\"x\\\", \\\"n\\\": 1}', r'{\\\"api_key\\\": <redacted>, \\\"n\\\": 1}'),
    (r'{\\\"token\\\": \\\"a\\\\\\\"b\\\", \\\"n\\\": 1}', r'{\\\"token\\\": <redacted>, \\\"n\\\": 1}'),
    (r'{\\\"token\\\": [\\\"a]\\\"], \\\"n\\\": 1}', r'{\\\"token\\\": <redacted>, \\\"n\\\": 1}'),
    # a secret-named flag in a command a message prints: its value is the next item or word
    ("CalledProcessError: Command '['vllm', 'serve', '--api-key', 'abc123xyz']' returned non-zero exit",
     "CalledProcessError: Command '['vllm', 'serve', '--api-key', <redacted>]' returned non-zero exit"),
    ("('--token', 'abc')", "('--token', <redacted>)"),
    ('["--hf-token", "hf_x", "--eos-token", "</s>"]', '["--hf-token", <redacted>, "--eos-token", "</s>"]'),
    ("Command 'vllm serve --api-key abc123 --port 8000' failed",
     "Command 'vllm serve --api-key <redacted> --port 8000' failed"),
    ("['--db-password', b'x', '-n', '1']", "['--db-password', <redacted>, '-n', '1']"),
    # counts, measures and a flag with no value after it are kept
    ("('--max-tokens', '512', '--password-len', '12', '--tokens', '3', '--eos-token', '</s>')",
     "('--max-tokens', '512', '--password-len', '12', '--tokens', '3', '--eos-token', '</s>')"),
    ("run --api-key --port 1; non-zero exit", "run --api-key --port 1; non-zero exit"),
    ("range 3:-secret_x rest, a-token b", "range 3:-secret_x rest, a-token b"),  # no flag inside a word
    # a string cut short inside an outer one ends where the outer one does
    (r'{\\\"token\\\": \\\"abc\", \"n\": \"keep\"}', r'{\\\"token\\\": <redacted>, \"n\": \"keep\"}'),
])
def test_scrub(text: str, expected: str) -> None:
    assert scrub(text) == expected


def test_scrub_argv_hides_a_flag_that_names_a_secret_anywhere() -> None:
    argv = ["train.py", "--aws-secret-access-key", "AK", "--client_secret=CS", "--password-len", "12"]
    assert scrub_argv(argv) == ["train.py", "--aws-secret-access-key", REDACTED, "--client_secret=<redacted>",
                                "--password-len", "12"]


def test_scrub_argv_keeps_ordinary_flags() -> None:
    argv = ["train.py", "--lr=3e-4", "--steps", "10"]
    assert scrub_argv(argv) == argv


#: Every secret's text starts and ends with these: a leak of any part of it (its head, or its
#: tail after a cut) leaves one of them.
_HEAD, _TAIL = "SECRETHEAD", "SECRETTAIL"
_SECRET_KEYS = ("password", "db_password", "api_key", "apiKey", "hf_token", "api_token", "token",
                "secret", "Authorization", "x-api-key", "access_token",
                # the secret word not at the key's end (these leaked before)
                "aws_secret_access_key", "SECRET_KEY", "private_key", "client_secret", "password1",
                "passwords", "secrets", "db_password_hash", "PRIVATE-KEY", "passphrase")
_PLAIN_KEYS = ("lr", "model", "step", "max_new_tokens", "eos_token", "notes", "tokens", "max_tokens",
               "num_tokens", "pad_token", "mask_token", "token_budget")
_ANY_TEXT = st.text(st.sampled_from(list("'\"\\[]{}()<>,;&:= b\n"))
                    | st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


@st.composite
def _secret(draw: st.DrawFn) -> object:
    """A value a secret key may hold: text or bytes (any characters, quotes and brackets
    included), a number, None, or lists, tuples and dicts of those, nested."""
    body = draw(_ANY_TEXT)
    text = f"{_HEAD}{body}{_TAIL}"
    leaf = draw(st.sampled_from(["str", "bytes", "int", "none"]))
    if leaf == "bytes":
        return text.encode("utf-8", "backslashreplace")
    return {"str": text, "int": draw(st.integers()), "none": None}[leaf]


_SECRET_VALUES = st.recursive(
    _secret(),
    lambda inner: st.lists(inner, max_size=3) | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(st.sampled_from(_PLAIN_KEYS + _SECRET_KEYS), inner, max_size=3),
    max_leaves=6,
)
_PLAIN_VALUES = st.integers() | st.floats(allow_nan=False) | st.text("abc xyz<>/", max_size=8)


@st.composite
def _config(draw: st.DrawFn) -> dict[str, object]:
    """A dict a message prints: secret keys among plain ones, nested dicts included."""
    plain = draw(st.dictionaries(st.sampled_from(_PLAIN_KEYS), _PLAIN_VALUES, max_size=3))
    secret = draw(st.dictionaries(st.sampled_from(_SECRET_KEYS), _SECRET_VALUES, min_size=1, max_size=3))
    out: dict[str, object] = {**plain, **secret}
    if draw(st.booleans()):
        out["nested"] = dict(secret)
    return out


def _redacted(value: object) -> object:
    """``value`` with every secret-keyed value replaced: what scrub must leave."""
    if isinstance(value, dict):
        return {k: _REDACTED_MARK if _secret_key(k) else _redacted(v) for k, v in value.items()}
    return value


def _secret_key(key: str) -> bool:
    import re

    if key in ("eos_token", "pad_token", "mask_token"):
        return False
    return re.fullmatch(rf"[\w.-]*{_SECRET_WORD}[\w-]*", key, re.IGNORECASE) is not None and (
        not key.lower().endswith("tokens") and key != "token_budget")


class _Redacted:
    def __repr__(self) -> str:
        return REDACTED


_REDACTED_MARK = _Redacted()


@settings(max_examples=300, deadline=None)
@given(_config())
def test_no_secret_text_is_left_in_a_dict_a_message_prints(config: dict[str, object]) -> None:
    """As Python's repr, as JSON and as JSON inside one, two or three JSON strings (a message
    logged as JSON, then logged again),
    nothing of a secret-keyed value survives, and in the repr exactly the value is replaced."""
    message = f"ValueError: bad config {config!r} (see docs)"
    out = scrub(message)
    assert _HEAD not in out and _TAIL not in out, out
    assert out == f"ValueError: bad config {_redacted(config)!r} (see docs)"
    as_json = json.dumps(config, default=repr, ensure_ascii=False)
    once = json.dumps({"msg": f"config {as_json}"})
    for text in (f"config {as_json}", once, json.dumps({"msg": once}), json.dumps([json.dumps([once])])):
        out = scrub(text)
        assert _HEAD not in out and _TAIL not in out, (text, out)


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from(list("'\"\\[]{}():=,;& ab_-")) | st.characters(codec="utf-8"), max_size=60))
def test_text_without_a_secret_key_is_left_as_it_is(text: str) -> None:
    import re

    assume(re.search(_SECRET_WORD, text, re.IGNORECASE) is None and _CREDENTIALS.search(text) is None)
    assert scrub(text) == text


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from(list("'\"\\[]{}, ab")) | st.characters(codec="utf-8"), max_size=12),
       st.integers(1, 4), st.sampled_from(["token", "api_key", "password"]), st.sampled_from(["", _TAIL]))
@example("a\\", 1, "token", "").via("a backslash just before the closing quote")
@example('a\\"', 2, "api_key", "").via("a quote and a backslash, two levels deep")
def test_json_inside_json_strings_loses_exactly_the_value(
        body: str, depth: int, key: str, tail: str) -> None:
    """JSON logged as a string ``depth`` times over: the secret's string is replaced whole (its own
    quotes and backslashes, escaped at every level, do not end it early nor late; the value may
    end in one)."""
    value = json.dumps(f"{_HEAD}{body}{tail}")
    text, expected = (f'{{"{key}": {v}, "n": "keep"}}' for v in (value, REDACTED))
    for _ in range(depth):
        text, expected = json.dumps(text), json.dumps(expected)
    assert scrub(text) == expected


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(AUTH_SCHEMES)), st.booleans(),
       st.sampled_from(["Authorization: ", "authorization=", "Proxy-Authorization: ", "x.authorization = "]),
       st.text(st.characters(min_codepoint=33, max_codepoint=126, exclude_characters=",;'\""), max_size=20),
       st.sampled_from(["", " rest", ", next", "; next", "\n"]))
def test_an_authorization_scheme_is_redacted_with_its_credential(
        scheme: str, upper: bool, key: str, body: str, after: str) -> None:
    credential = f"{_HEAD}{body}{_TAIL}"
    out = scrub(f"{key}{scheme.upper() if upper else scheme.title()} {credential}{after}")
    assert out == f"{key}{REDACTED}{after}"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(
    st.sampled_from(("tokens", "max_tokens", "num_tokens", "token_budget", "password_len", "secret_count",
                     "eos_token", "lr", "API_KEY_LENGTH")),
    st.sampled_from(("=", ": ", " = ", "': ", '": ')), st.integers(0, 10**9)), max_size=6),
    st.sampled_from((", ", " ", "; ")))
def test_counts_and_measures_in_text_are_left_as_they_are(
        pairs: list[tuple[str, str, int]], sep: str) -> None:
    """``tokens=512``, ``max_tokens: 1024``, ``password_len=12``: numbers that count, not secrets."""
    text = sep.join(f"{key}{colon}{n}" for key, colon, n in pairs)
    assert scrub(text) == text


_FLAGS = ("--api-key", "--token", "--hf-token", "--hf_token", "--aws-secret-access-key", "-password",
          "--client-secret", "--passphrase")
_PLAIN_ARGS = ("vllm", "serve", "--port", "8000", "--max-tokens", "512", "--eos-token", "</s>", "-n", "x y")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PLAIN_ARGS), max_size=4), st.sampled_from(_FLAGS),
       st.text(st.sampled_from(list("'\"\\[](), ab"))
               | st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=10),
       st.lists(st.sampled_from(_PLAIN_ARGS), max_size=4))
def test_a_secret_flag_value_in_a_printed_command_is_redacted(
        head: list[str], flag: str, body: str, tail: list[str]) -> None:
    """A command a message prints as a list (``CalledProcessError``), a tuple or JSON, loses
    exactly the value after a secret-named flag; the rest of the command stays."""
    value = f"{_HEAD}{body}{_TAIL}"
    argv, expected = [*head, flag, value, *tail], [*head, flag, _REDACTED_MARK, *tail]
    error = str(subprocess.CalledProcessError(1, argv))
    assert scrub(error) == str(subprocess.CalledProcessError(1, expected))
    assert scrub(repr(tuple(argv))) == repr(tuple(expected))
    for text in (json.dumps(argv), json.dumps({"msg": json.dumps(argv)})):
        out = scrub(text)
        assert _HEAD not in out and _TAIL not in out, (text, out)
    if value.isprintable() and not any(c in value for c in " '\"\\,;&\t"):  # a word in a shell line
        line, expected_line = (" ".join(map(str, words)) for words in (argv, expected))
        assert scrub(f"Command '{line}' failed") == f"Command '{expected_line}' failed"


@pytest.mark.parametrize(("key", "content"), [
    ("eos_token", False), ("tokenizer.pad_token", False), ("mask_token", False),
    ("hf_token", True), ("access_token", True), ("rl.token", True), ("eos_token_id", False),
    # a secret word anywhere in the last segment, as in scrubbed text; counts and measures kept
    ("aws_secret_access_key", True), ("rl.client_secret", True), ("password1", True),
    ("db_password_hash", True), ("private_key", True), ("password_len", False), ("max_tokens", False),
    ("token_budget", False),
])
def test_a_tokenizer_special_token_is_vocabulary_not_content(key: str, content: bool) -> None:
    """``span(..., eos_token="</s>")`` keeps what a tokenizer error needs to be read."""
    assert is_content_key(key) is content


@pytest.mark.parametrize(("text", "expected"), [
    ("{'mask_token': '[MASK]'}", "{'mask_token': '[MASK]'}"),
    ("{'eos_token': '</s>', 'api_key': 'x'}", "{'eos_token': '</s>', 'api_key': <redacted>}"),
    ("tokenizer.pad_token=<pad>", "tokenizer.pad_token=<pad>"),
    ("my_eos_token=abc", "my_eos_token=<redacted>"),
    ("xmask_token=abc", "xmask_token=<redacted>"),
    # A special token's value left open runs to the end: kept whole, it hid the secrets after it.
    ("eos_token=( password=hunter2", "eos_token=( password=<redacted>"),
    ("bad special tokens: eos_token=[ api_key=sk_live_abc123",
     "bad special tokens: eos_token=[ api_key=<redacted>"),
    ("pad_token: ' ; hf_token=abc123xyz", "pad_token: ' ; hf_token=<redacted>"),
])
def test_a_tokenizer_special_token_in_a_message_is_kept_and_hides_nothing(text: str, expected: str) -> None:
    assert scrub(text) == expected
