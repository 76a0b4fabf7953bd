"""Schemathesis hooks for jetcron's /openapi.json.

The document names what JSON Schema cannot say: formats (info.x-jetcron-formats,
each with the Rust check that decides it) and rules between fields (x-jetcron-rules
on an operation, explained under info.x-jetcron-rules). This file gives
Schemathesis a generator for every format, so that a value the document allows is
one the gateway accepts, and makes each positive case keep its operation's rules.
Negative cases are left as drawn: the gateway must refuse them.

A format or rule of the document that this file does not know fails the load;
services/jetcron/tests/openapi_schemathesis.rs also fails on one this file knows
that the document no longer names (it compares FORMATS and RULES with it).

Run by hand against a gateway (cd here first, so that hooks.py is found; the
/v1/namespaces/ routes apart and last, as a fuzzed policy refuses later job puts):
    st --config-file schemathesis.toml run http://127.0.0.1:8080/openapi.json \
        --checks all --phases examples,coverage,fuzzing \
        -H 'Authorization: Bearer <admin token>' --exclude-path-regex '^/v1/namespaces/'
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata

import schemathesis
from hypothesis import strategies as st


def _describe_lambdas_safely() -> None:
    """Let Hypothesis describe a lambda as `<unknown>` when reading its source fails.

    Hypothesis prints a strategy (its lambdas' source included) when it checks a recursive one,
    deep in Schemathesis' generation of a body that holds any JSON (a NATS target's payload);
    parsing a module's source that deep fails on CPython 3.11.7 with "SystemError: AST constructor
    recursion depth mismatch" (a CPython bug), which would end the operation's tests. The
    description only names the strategy in messages.
    """
    from hypothesis.internal import lambda_sources

    describe = lambda_sources.lambda_description

    def described(f):
        try:
            return describe(f)
        except SystemError:
            return "lambda: <unknown>"

    lambda_sources.lambda_description = described


_describe_lambdas_safely()

# ------------------------------------------------------------------ formats

# Instants the jobs and queries draw: well inside chrono's range, before the
# one-shot schedules (2090-2098) and the end_at a positive case gets (2099).
EARLIEST = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)
LATEST = dt.datetime(2080, 12, 31, tzinfo=dt.timezone.utc)
OFFSETS = ["Z", "z", "+00:00", "-00:00", "+05:30", "-08:00", "+14:00", "-12:00", "+23:59"]


def rfc3339(moment: dt.datetime, separator: str = "T", offset: str = "Z", fraction: str = "") -> str:
    """`moment` (UTC) written with `offset` (the same instant shifted to it)."""
    if offset in ("Z", "z"):
        local = moment
    else:
        sign = 1 if offset[0] == "+" else -1
        hours, minutes = int(offset[1:3]), int(offset[4:6])
        local = moment + sign * dt.timedelta(hours=hours, minutes=minutes)
    return local.strftime(f"%Y-%m-%d{separator}%H:%M:%S") + fraction + offset


def instants(earliest: dt.datetime, latest: dt.datetime) -> st.SearchStrategy[str]:
    seconds = int((latest - earliest).total_seconds())
    return st.builds(
        lambda s, sep, off, frac: rfc3339(earliest + dt.timedelta(seconds=s), sep, off, frac),
        st.integers(0, seconds),
        st.sampled_from(["T", "t", " "]),
        st.sampled_from(OFFSETS),
        st.sampled_from(["", ".5", ".123", ".123456789"]),
    )


def past_instants() -> st.SearchStrategy[str]:
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    return instants(EARLIEST, now - dt.timedelta(days=1))


SCHEDULES = [
    "@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly", "@DAILY",
    "@every 1s", "@every 90s", "@every 1h30m", "@every 2d", "@every  15m ",
    "*/5 * * * *", "0 0 2 * * *", "0 30 9 * * MON-FRI", "15 10 * * *", " 0 0 1 1 * ",
    "0 0 12 * * * 2085", "*/10 * * * * *", "0 0 0 1 * *", "0\t0\t*\t*\t*", "0 9 * * 1,3,5",
]


def schedules() -> st.SearchStrategy[str]:
    at = instants(dt.datetime(2090, 1, 1, tzinfo=dt.timezone.utc), dt.datetime(2098, 12, 31, tzinfo=dt.timezone.utc))
    return st.one_of(st.sampled_from(SCHEDULES), at.map(lambda t: "@at " + t))


UNITS = {"ns": 1e-9, "ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds_of(text: str) -> float:
    """What humantime reads in the durations this file writes (`1h30m`, `250ms`)."""
    total = 0.0
    for number, unit in re.findall(r"([0-9.]+)\s*(ns|ms|s|m|h|d)", text):
        total += float(number) * UNITS[unit]
    return total


def durations(low: float, high: float) -> st.SearchStrategy[str]:
    """Durations from `low` to `high` seconds, in whole units."""
    def spell(seconds: int, unit: str) -> str | None:
        size = UNITS[unit]
        if size >= 1 and seconds % size == 0:
            return f"{seconds // int(size)}{unit}"
        return None

    whole = st.integers(int(max(low, 0) + 0.999999), int(high)).flatmap(
        lambda s: st.sampled_from([text for u in ("s", "m", "h", "d") if (text := spell(s, u))] or [f"{s}s"])
    )
    options = [whole]
    if low < 1:
        options.append(st.integers(max(int(low * 1000), 0), 999).map(lambda ms: f"{ms}ms"))
    if low <= 5400 <= high:
        options.append(st.just("1h 30m"))
    return st.one_of(options).filter(lambda t: low <= seconds_of(t) <= high)


NO_CONTROL = st.characters(exclude_categories=("Cc", "Cs"))
ANY_TEXT = st.characters(exclude_categories=("Cs",))


def texts(low: int, high: int, alphabet: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Text of `low` to `high` UTF-8 bytes."""
    return st.text(alphabet, min_size=(low + 3) // 4, max_size=high).filter(
        lambda t: low <= len(t.encode("utf-8")) <= high
    )


TOKEN = st.from_regex(r"\A[A-Za-z0-9_-]{1,12}\Z")
WORDS = st.sampled_from(["orders", "billing", "Überweisung", "ops", "x", "a1", "svc", "日本"])


def subjects() -> st.SearchStrategy[str]:
    token = st.one_of(TOKEN, WORDS)
    return st.lists(token, min_size=1, max_size=5).map(".".join).filter(
        lambda s: not re.match(r"(jetcron(\.|$)|\$|_INBOX(\.|$))", s)
    )


def subject_filters() -> st.SearchStrategy[str]:
    token = st.one_of(TOKEN, WORDS, st.just("*"))
    return st.one_of(
        st.just(">"),
        st.builds(
            lambda tokens, tail: ".".join(tokens) + (".>" if tail else ""),
            st.lists(token, min_size=1, max_size=4),
            st.booleans(),
        ),
    )


HOSTS = ["example.com", "hooks.example.org", "127.0.0.1", "[::1]", "localhost", "xn--bcher-kva.example"]


def http_urls() -> st.SearchStrategy[str]:
    return st.builds(
        lambda lead, scheme, host, port, path: f"{lead}{scheme}://{host}{port}{path}",
        st.sampled_from(["", " "]),
        st.sampled_from(["http", "https", "HTTPS"]),
        st.sampled_from(HOSTS),
        st.sampled_from(["", ":8080", ":443"]),
        st.sampled_from(["", "/", "/hook", "/a/b?x=1&y=%20", "/ü#frag"]),
    )


def url_prefixes() -> st.SearchStrategy[str]:
    return st.builds(
        lambda scheme, host, path: f"{scheme}://{host}{path}",
        st.sampled_from(["http", "https"]),
        st.sampled_from(HOSTS),
        st.sampled_from(["", "/", "/internal", "/a/b"]),
    )


def mail_addresses() -> st.SearchStrategy[str]:
    plain = st.builds(
        lambda local, domain: f"{local}@{domain}",
        st.sampled_from(["ops", "jetcron", "a.b+c", "ü"]),
        st.sampled_from(["example.com", "localhost", "mail.example.org"]),
    )
    named = st.builds(lambda name, address: f"{name} <{address}>", st.sampled_from(["Ops", "", "Ü, Team"]), plain)
    return st.one_of(plain, named)


def paths() -> st.SearchStrategy[str]:
    return st.lists(st.one_of(TOKEN, WORDS), max_size=4).map(lambda parts: "/" + "/".join(parts))


def run_ids() -> st.SearchStrategy[str]:
    return st.builds(
        lambda u, spelling: spelling(u),
        st.uuids(),
        st.sampled_from([str, lambda u: u.hex, lambda u: "{" + str(u) + "}", lambda u: "urn:uuid:" + str(u)]),
    )


def cursors() -> st.SearchStrategy[str]:
    return st.builds(lambda ms, run: f"{ms}_{run}", st.integers(-(2**63), 2**63 - 1), run_ids())


def label_selectors() -> st.SearchStrategy[str]:
    key = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,8}\Z")
    value = texts(0, 255, st.characters(exclude_categories=("Cc", "Cs"), exclude_characters=","))
    pair = st.builds(lambda k, v: f"{k}={v}", key, value)
    return st.lists(pair, max_size=4).map(",".join)


# The format families of the document, each a function of the rest of the
# name (after the `:`) to its generator.
FORMATS = {
    "jetcron-schedule": lambda _: schedules(),
    "jetcron-instant": lambda _: instants(EARLIEST, LATEST),
    "jetcron-past-instant": lambda _: past_instants(),
    "jetcron-http-url": lambda _: http_urls(),
    "jetcron-subject": lambda _: subjects(),
    "jetcron-subject-filter": lambda _: subject_filters(),
    "jetcron-url-prefix": lambda _: url_prefixes(),
    "jetcron-mail-address": lambda _: mail_addresses(),
    "jetcron-path": lambda _: paths(),
    "jetcron-cursor": lambda _: cursors(),
    "jetcron-label-selector": lambda _: label_selectors(),
    "jetcron-duration": lambda bounds: durations(*map(seconds_of, bounds.split(".."))),
    "jetcron-text": lambda bounds: texts(*map(int, bounds.split("..")), NO_CONTROL),
    "jetcron-bytes": lambda bounds: texts(*map(int, bounds.split("..")), ANY_TEXT),
}

# ------------------------------------------------------------------ repairs

# The coverage phase draws a string with a pattern from the pattern alone, not
# from its format's generator: a positive case may carry "2026-13-45T00:00:00Z"
# where the document says jetcron-instant. Such a value is replaced by one of
# the format before the case is sent. Each check below is as strict as the
# generator above (stricter than the gateway), so a value drawn here stays.

INSTANT = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?([Zz]|[+-]([0-9]{2}):([0-9]{2}))"
)


def instant_of(text: str) -> dt.datetime | None:
    """The instant (UTC) `text` spells, if it is a valid RFC 3339 one."""
    match = INSTANT.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    if year < 1 or second > 59:
        return None
    offset = match.group(8)
    if offset not in ("Z", "z") and (int(match.group(9)) > 23 or int(match.group(10)) > 59):
        return None
    try:
        return parse_instant(text)
    except (ValueError, OverflowError):
        return None


def parse_instant(text: str) -> dt.datetime:
    text = re.sub(r"[Tt ]", "T", text, count=1).replace("z", "Z").replace("Z", "+00:00")
    return dt.datetime.fromisoformat(text).astimezone(dt.timezone.utc).replace(microsecond=0)


DURATION = re.compile(r"(?:[0-9]+(?:ns|ms|s|m|h|d) ?)+")
URL = re.compile(r" ?[Hh][Tt][Tt][Pp][Ss]?://(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\])(?::[0-9]{1,4})?(?:[/?#][^\s\x00-\x1f\x7f-\x9f]*)?")


def bounds(rest: str) -> tuple[str, str]:
    low, _, high = rest.partition("..")
    return low, high


def byte_count(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def no_control(text: str) -> bool:
    return not any(unicodedata.category(c) == "Cc" for c in text)


def format_holds(name: str, value: str) -> bool:
    family, _, rest = name.partition(":")
    if family == "jetcron-schedule":
        if value in SCHEDULES:
            return True
        at = instant_of(value[4:]) if value.startswith("@at ") else None
        return at is not None and 2090 <= at.year <= 2098
    if family == "jetcron-instant":
        at = instant_of(value)
        return at is not None and EARLIEST <= at <= LATEST
    if family == "jetcron-past-instant":
        at = instant_of(value)
        return at is not None and EARLIEST <= at <= dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=1)
    if family == "jetcron-duration":
        low, high = bounds(rest)
        return DURATION.fullmatch(value.strip()) is not None and seconds_of(low) <= seconds_of(value) <= seconds_of(high)
    if family in ("jetcron-text", "jetcron-bytes"):
        low, high = map(int, bounds(rest))
        return low <= byte_count(value) <= high and (family == "jetcron-bytes" or no_control(value))
    if family == "jetcron-http-url":
        return URL.fullmatch(value) is not None
    if family in ("jetcron-subject", "jetcron-subject-filter"):
        return byte_count(value) <= 1024
    if family == "jetcron-url-prefix":
        return byte_count(value) <= 2048
    if family == "jetcron-mail-address":
        return byte_count(value) <= 320
    if family == "jetcron-path":
        return byte_count(value) <= 4096
    if family == "jetcron-cursor":
        millis = value.split("_", 1)[0]
        return -(2**63) <= int(millis) <= 2**63 - 1
    if family == "jetcron-label-selector":
        pairs = [p.split("=", 1) for p in value.split(",") if p]
        return len({k for k, _ in pairs}) <= 32 and all(byte_count(v) <= 255 for _, v in pairs)
    raise ValueError(f"no check for the format {name!r}")


def format_example(name: str, schema: dict) -> str:
    family, _, rest = name.partition(":")
    if family in ("jetcron-text", "jetcron-bytes"):
        low = max(int(bounds(rest)[0]), schema.get("minLength", 0))
        return "x" * low
    if family == "jetcron-duration":
        low, high = bounds(rest)
        return low if seconds_of(low) > 0 else high
    return {
        "jetcron-schedule": "@daily",
        "jetcron-instant": "2030-01-01T00:00:00Z",
        "jetcron-past-instant": "2020-01-01T00:00:00Z",
        "jetcron-http-url": "https://example.com/hook",
        "jetcron-subject": "svc.x",
        "jetcron-subject-filter": "svc.>",
        "jetcron-url-prefix": "https://example.com",
        "jetcron-mail-address": "ops@example.com",
        "jetcron-path": "/tmp",
        "jetcron-cursor": "0_00000000-0000-0000-0000-000000000000",
        "jetcron-label-selector": "team=ops",
    }[family]


DOCUMENT: dict = {}


def resolved(schema):
    while isinstance(schema, dict) and "$ref" in schema:
        target = DOCUMENT
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def fits(value, schema) -> bool:
    """Whether `value` is of the branch `schema` (its type, and its tag)."""
    schema = resolved(schema)
    kinds = schema.get("type")
    kinds = [kinds] if isinstance(kinds, str) else kinds
    if kinds:
        names = {
            "null": value is None, "boolean": isinstance(value, bool), "string": isinstance(value, str),
            "array": isinstance(value, list), "object": isinstance(value, dict),
            "integer": isinstance(value, int) and not isinstance(value, bool),
            "number": isinstance(value, (int, float)) and not isinstance(value, bool),
        }
        if not any(names.get(k, False) for k in kinds):
            return False
    tag = schema.get("properties", {}).get("type", {})
    if isinstance(value, dict) and "const" in tag:
        return value.get("type") == tag["const"]
    return True


def repair(value, schema):
    """`value` with every jetcron-* format value that does not hold replaced."""
    schema = resolved(schema)
    if not isinstance(schema, dict):
        return value
    for key in ("anyOf", "oneOf"):
        branches = [b for b in schema.get(key, []) if fits(value, b)]
        if branches:
            value = repair(value, branches[0])
    for branch in schema.get("allOf", []):
        value = repair(value, branch)
    kinds = schema.get("type")
    kinds = [kinds] if isinstance(kinds, str) else kinds or []
    if isinstance(value, float) and value.is_integer() and "integer" in kinds and "number" not in kinds:
        # whole-numbers: 3, not 3.0 (the gateway reads it into an integer type).
        return int(value)
    name = schema.get("format")
    if isinstance(value, str) and isinstance(name, str) and name.startswith("jetcron-"):
        try:
            holds = format_holds(name, value)
        except ValueError:
            holds = False
        if not holds:
            return format_example(name, schema)
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key in list(value):
            sub = properties.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                value[key] = repair(value[key], sub)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        value[:] = [repair(item, schema["items"]) for item in value]
    return value


def repair_case(case) -> None:
    raw = case.operation.definition.raw
    containers = {"path": case.path_parameters, "query": case.query, "header": case.headers}
    for parameter in raw.get("parameters", []):
        container = containers.get(parameter["in"])
        if container and parameter["name"] in container:
            value = container[parameter["name"]]
            container[parameter["name"]] = repair(value, parameter.get("schema", {}))
    body_schema = raw.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    if body_schema is not None and isinstance(case.body, (dict, list, str)):
        case.body = repair(case.body, body_schema)


# ------------------------------------------------------------------ rules


def job_of(case) -> str | None:
    body = case.body if isinstance(case.body, dict) else {}
    return body.get("id") or (case.path_parameters or {}).get("id")


def after_not_self(case) -> None:
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("after"), list):
        own = job_of(case)
        body["after"] = [link for link in body["after"] if not (isinstance(link, dict) and link.get("job") == own)]
        ensure_schedule_or_parent(body)


def no_cycle(case) -> None:
    # Whether a parent leads back depends on the jobs stored by earlier cases.
    # A positive case keeps only parents that sort after the job: no chain of
    # such links returns to where it started.
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("after"), list):
        own = job_of(case) or ""
        body["after"] = [
            link for link in body["after"] if not isinstance(link, dict) or str(link.get("job", "")) > own
        ]
        ensure_schedule_or_parent(body)


def after_unique(case) -> None:
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("after"), list):
        seen, kept = set(), []
        for link in body["after"]:
            name = link.get("job") if isinstance(link, dict) else None
            if name not in seen:
                seen.add(name)
                kept.append(link)
        body["after"] = kept
        ensure_schedule_or_parent(body)


def ensure_schedule_or_parent(body: dict) -> None:
    if not body["after"] and not isinstance(body.get("schedule"), str):
        body["schedule"] = "@daily"


def start_before_end(case) -> None:
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("end_at"), str):
        # Later than any start_at or @at this file draws.
        body["end_at"] = "2099-12-31T23:59:59Z"


def fires(case) -> None:
    # The schedules drawn fire at least once a year up to 2099, and every
    # @at is after any instant drawn; start_before_end keeps end_at there.
    start_before_end(case)


def backoff_le_max(case) -> None:
    body = case.body
    retry = body.get("retry") if isinstance(body, dict) else None
    if not isinstance(retry, dict) or not isinstance(retry.get("max_backoff"), str):
        return
    backoff = retry.get("backoff") if isinstance(retry.get("backoff"), str) else "1s"
    if seconds_of(retry["max_backoff"]) < seconds_of(backoff):
        retry["max_backoff"] = backoff


def id_matches_path(case) -> None:
    if isinstance(case.body, dict) and "id" in case.body:
        case.body["id"] = case.path_parameters["id"]


def name_matches_path(case) -> None:
    if isinstance(case.body, dict) and "name" in case.body:
        case.body["name"] = case.path_parameters["name"]


def revision_once(case) -> None:
    headers = case.headers or {}
    in_header = any(h.lower() in ("if-match", "if-none-match") for h in headers)
    if in_header and isinstance(case.body, dict):
        case.body.pop("expected_revision", None)
    if in_header and case.query:
        case.query.pop("expected_revision", None)


def range_order(case) -> None:
    query = case.query
    if not query or not ("from" in query or "to" in query):
        return
    span = dt.timedelta(days=92 if case.operation.path == "/v1/runs" else 31)
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    if "to" not in query:
        # `to` is now: `from` within the span before it.
        query["from"] = rfc3339(now - dt.timedelta(hours=1))
    elif "from" in query:
        start = parse_instant(query["from"])
        query["to"] = rfc3339(start + min(span, dt.timedelta(days=1)))


def backfill_range(case) -> None:
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("from"), str):
        # A minute holds at most 61 fires of any schedule drawn (1 s at least).
        body["to"] = rfc3339(parse_instant(body["from"]) + dt.timedelta(minutes=1))


def fires_after_from(case) -> None:
    # The schedules drawn fire after any instant drawn (the @at ones in 2090-2098).
    pass


def recipients(case) -> None:
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("to"), list) and isinstance(body.get("cc"), list):
        body["cc"] = body["cc"][: max(0, 50 - len(body["to"]))]


RULES = {
    "after-not-self": after_not_self,
    "no-cycle": no_cycle,
    "after-unique": after_unique,
    "start-before-end": start_before_end,
    "backoff-le-max": backoff_le_max,
    "fires": fires,
    "id-matches-path": id_matches_path,
    "name-matches-path": name_matches_path,
    "revision-once": revision_once,
    "range-order": range_order,
    "backfill-range": backfill_range,
    "fires-after-from": fires_after_from,
    "recipients": recipients,
    # Kept for every case by `repair`.
    "whole-numbers": lambda case: None,
}

# Rules that bind the body to the path go first: the others read the id.
FIRST = ("id-matches-path", "name-matches-path")

# ------------------------------------------------------------------ hooks


@schemathesis.hook
def before_load_schema(context, raw_schema: dict) -> None:
    DOCUMENT.clear()
    DOCUMENT.update(raw_schema)
    info = raw_schema.get("info", {})
    for name in info.get("x-jetcron-formats", {}):
        family, _, rest = name.partition(":")
        if family not in FORMATS:
            raise ValueError(f"hooks.py has no generator for the format {name!r}")
        schemathesis.openapi.format(name, FORMATS[family](rest))
    unknown = set(info.get("x-jetcron-rules", {})) - set(RULES)
    if unknown:
        raise ValueError(f"hooks.py does not keep the rules {sorted(unknown)}")


SURROGATE_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def joined_surrogates(value):
    """`value` with each surrogate pair as the one character JSON's escapes make of it.

    Schemathesis judges a Python string holding a pair as invalid text, but its JSON
    (`"\\udb57\\udc14"`) is one valid character when the gateway reads it.
    """
    if isinstance(value, str):
        return SURROGATE_PAIR.sub(lambda m: m.group().encode("utf-16", "surrogatepass").decode("utf-16"), value)
    if isinstance(value, list):
        return [joined_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {joined_surrogates(k): joined_surrogates(v) for k, v in value.items()}
    return value


@schemathesis.hook
def map_case(context, case):
    if isinstance(case.body, (str, list, dict)):
        case.body = joined_surrogates(case.body)
    meta = case.meta
    if meta is not None and meta.generation.mode.is_negative:
        return case
    repair_case(case)
    rules = case.operation.definition.raw.get("x-jetcron-rules", [])
    for rule in sorted(rules, key=lambda r: r not in FIRST):
        RULES[rule](case)
    return case
