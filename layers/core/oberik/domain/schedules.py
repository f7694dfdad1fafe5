"""When a scheduled task runs: EventBridge Scheduler's three kinds of expression, checked and evaluated.

- `at(yyyy-mm-ddThh:mm:ss)`: once, at that wall-clock time in the schedule's time zone.
- `cron(minutes hours day-of-month month day-of-week year)`: AWS's six fields, in the schedule's time zone.
  Day-of-week counts 1-7 from Sunday (or SUN-SAT), one of the two day fields must be `?`, and `L`, `W` and `#`
  mean what they mean on AWS.
- `rate(n minute|minutes|hour|hours|day|days)`: every n units, counted from when the schedule was made.

The API and the agent's tools validate with `parse`; listings show `next_run`; the local clock (moto never
fires a schedule) decides what is due with the same `next_run`, so the three cannot disagree. Pure: no clock
is read here, every function is handed `now`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from oberik.domain.errors import Invalid

Kind = Literal["at", "cron", "rate"]
KINDS: tuple[Kind, ...] = ("at", "cron", "rate")

_AT = re.compile(r"^at\((.*)\)$", re.DOTALL)
_CRON = re.compile(r"^cron\((.*)\)$", re.DOTALL)
_RATE = re.compile(r"^rate\((.*)\)$", re.DOTALL)
_AT_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$")
_RATE_BODY = re.compile(r"^\s*(\d+)\s+(minute|minutes|hour|hours|day|days)\s*$")
_UNIT_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}
# AWS accepts years 1970-2199 in the sixth cron field.
_YEARS = (1970, 2199)
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_CRON_FIELDS = ("minutes", "hours", "day-of-month", "month", "day-of-week", "year")


@dataclass(frozen=True)
class ScheduleSpec:
    """A checked schedule: its kind, the expression as EventBridge Scheduler takes it, and its time zone."""

    kind: Kind
    expression: str  # at(...), cron(...) or rate(...)
    timezone: str = "UTC"

    @property
    def one_time(self) -> bool:
        return self.kind == "at"

    @property
    def body(self) -> str:
        """What is inside the parentheses."""
        return self.expression[self.expression.index("(") + 1 : -1]

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "expression": self.expression, "timezone": self.timezone}


# --- time zones --------------------------------------------------------------------------------------------


def zone(name: str | None, *, field: str = "timezone") -> ZoneInfo:
    """The IANA time zone `name` (UTC when None); Invalid with a sentence for anything else."""
    if name is None:
        return ZoneInfo("UTC")
    if not isinstance(name, str) or not name.strip() or len(name) > 64 or ".." in name or name.startswith("/"):
        raise Invalid(f"{field} must be an IANA time zone name such as Europe/Paris or UTC.", field=field)
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise Invalid(
            f"{field} {name!r} is not a time zone this platform knows; use an IANA name such as Europe/Paris, "
            "America/New_York or UTC.",
            field=field,
        ) from e


# --- parsing ----------------------------------------------------------------------------------------------


def parse(
    *,
    at: str | None = None,
    cron: str | None = None,
    rate: str | None = None,
    timezone: str | None = None,
    now: datetime,
    prefix: str = "schedule",
) -> ScheduleSpec:
    """Check a schedule given as exactly one of `at`, `cron`, `rate` (each bare or written as the AWS
    expression, e.g. `rate(5 minutes)` or `5 minutes`), plus an optional time zone.

    `at` may also carry an offset (`2026-12-01T09:00:00+01:00`, `...Z`): it is then converted to the wall
    time of `timezone` (UTC when none is given). Raises Invalid naming the field.
    """
    given = {k: v for k, v in (("at", at), ("cron", cron), ("rate", rate)) if v is not None}
    if len(given) != 1:
        named = " and ".join(given) if given else "none of them"
        raise Invalid(
            f"{prefix} needs exactly one of at (a date and time), cron (a calendar rule) or rate (an interval); "
            f"it has {named}.",
            field=prefix,
        )
    tz_field = f"{prefix}.timezone"
    tz = zone(timezone, field=tz_field)
    tz_name = timezone or "UTC"
    kind, value = next(iter(given.items()))
    field = f"{prefix}.{kind}"
    if not isinstance(value, str) or not value.strip():
        raise Invalid(f"{field} must be a non-empty string.", field=field)
    value = value.strip()
    if kind == "at":
        return _parse_at(value, tz, tz_name, now=now, field=field)
    if kind == "cron":
        inner = _CRON.match(value)
        spec = ScheduleSpec("cron", f"cron({(inner.group(1) if inner else value).strip()})", tz_name)
        _cron_check(spec, now=now, field=field)
        return spec
    inner = _RATE.match(value)
    spec = ScheduleSpec("rate", f"rate({(inner.group(1) if inner else value).strip()})", tz_name)
    _rate_seconds(spec.body, field=field)
    return spec


def from_expression(expression: str, timezone: str | None = None) -> ScheduleSpec:
    """A schedule as EventBridge Scheduler holds it (ScheduleExpression, ScheduleExpressionTimezone)."""
    tz_name = timezone or "UTC"
    zone(tz_name)
    for kind, pattern in (("at", _AT), ("cron", _CRON), ("rate", _RATE)):
        if pattern.match(expression.strip()):
            spec = ScheduleSpec(kind, expression.strip(), tz_name)  # type: ignore[arg-type]
            if kind == "at":
                _at_time(spec.body, "ScheduleExpression")
            elif kind == "rate":
                _rate_seconds(spec.body, field="ScheduleExpression")
            else:
                _translate_cron(spec.body, field="ScheduleExpression")
            return spec
    raise Invalid(f"{expression!r} is not an at(...), cron(...) or rate(...) expression.", field="ScheduleExpression")


def _parse_at(value: str, tz: ZoneInfo, tz_name: str, *, now: datetime, field: str) -> ScheduleSpec:
    inner = _AT.match(value)
    text = (inner.group(1) if inner else value).strip()
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError as e:
        raise Invalid(
            f"{field} {text!r} is not a date and time; write it as 2026-12-01T09:00:00 (in the schedule's "
            "timezone) or with an offset such as 2026-12-01T09:00:00+01:00.",
            field=field,
        ) from e
    if when.tzinfo is not None:
        when = when.astimezone(tz)
    local = when.replace(tzinfo=None, microsecond=0)
    if not _YEARS[0] <= local.year <= _YEARS[1]:
        raise Invalid(f"{field} must fall between {_YEARS[0]} and {_YEARS[1]}.", field=field)
    spec = ScheduleSpec("at", f"at({local.isoformat(timespec='seconds')})", tz_name)
    instant = local.replace(tzinfo=tz)
    if instant <= now:
        raise Invalid(
            f"{field} {local.isoformat(timespec='seconds')} in {tz_name} is in the past (it is now "
            f"{now.astimezone(tz).isoformat(timespec='seconds')} there); give a time in the future.",
            field=field,
        )
    return spec


def _at_time(body: str, field: str) -> datetime:
    if not _AT_TIME.match(body.strip()):
        raise Invalid(f"{field}: at(...) takes yyyy-mm-ddThh:mm:ss, not {body!r}.", field=field)
    return datetime.fromisoformat(body.strip())


def _rate_seconds(body: str, *, field: str) -> int:
    m = _RATE_BODY.match(body)
    if not m:
        raise Invalid(
            f"{field} {body!r} is not a rate; write a whole number and a unit, such as '5 minutes', '1 hour' or "
            "'2 days'.",
            field=field,
        )
    value, unit = int(m.group(1)), m.group(2)
    if value < 1:
        raise Invalid(f"{field} must be at least 1 {unit.rstrip('s')}.", field=field)
    singular = unit.rstrip("s")
    if value == 1 and unit != singular:
        raise Invalid(f"{field}: write '1 {singular}', not '1 {unit}'.", field=field)
    if value > 1 and unit == singular:
        raise Invalid(f"{field}: write '{value} {singular}s', not '{value} {unit}'.", field=field)
    return value * _UNIT_SECONDS[singular]


# --- cron -------------------------------------------------------------------------------------------------

_ITEM = re.compile(r"^(\*|[0-9A-Z]+(?:-[0-9A-Z]+)?)(?:/(\d+))?$")


def _number(token: str, lo: int, hi: int, names: tuple[str, ...], first: int, what: str, field: str) -> int:
    if token.isdigit():
        n = int(token)
    elif token in names:
        n = names.index(token) + first
    else:
        raise Invalid(f"{field}: {token!r} is not a valid {what} value.", field=field)
    if not lo <= n <= hi:
        raise Invalid(f"{field}: {what} must be between {lo} and {hi}, not {token}.", field=field)
    return n


def _check_items(text: str, lo: int, hi: int, names: tuple[str, ...], first: int, what: str, field: str) -> None:
    for item in text.split(","):
        m = _ITEM.match(item)
        if not m:
            raise Invalid(f"{field}: {item!r} is not a valid {what} value.", field=field)
        base, step = m.group(1), m.group(2)
        if step is not None and int(step) < 1:
            raise Invalid(f"{field}: the step in {item!r} must be at least 1.", field=field)
        if base == "*":
            continue
        bounds = [_number(t, lo, hi, names, first, what, field) for t in base.split("-")]
        if len(bounds) == 2 and bounds[0] > bounds[1]:
            raise Invalid(f"{field}: the range {base!r} runs backwards.", field=field)


def _dow_to_croniter(item: str) -> str:
    """AWS day-of-week (1-7 from Sunday) -> croniter's (0-6 from Sunday); names are the same in both."""

    def shift(token: str) -> str:
        return str(int(token) - 1) if token.isdigit() else token

    if item.endswith("L") and item != "L":
        return "L" + shift(item[:-1])
    if "#" in item:
        day, nth = item.split("#", 1)
        return f"{shift(day)}#{nth}"
    base, _, step = item.partition("/")
    if step:
        if base == "*":
            return f"*/{step}"
        parts = base.split("-")
        end = shift(parts[1]) if len(parts) == 2 else "6"
        return f"{shift(parts[0])}-{end}/{step}"
    return "-".join(shift(t) for t in base.split("-"))


def _translate_cron(body: str, *, field: str) -> tuple[str, str]:
    """Check an AWS cron body; return the same rule as a five-field croniter expression, and the year field
    (croniter has none: years are checked separately)."""
    fields = body.upper().split()
    if len(fields) != 6:
        raise Invalid(
            f"{field} must have six fields (minutes hours day-of-month month day-of-week year), e.g. "
            f"'0 9 ? * MON-FRI *'; {body!r} has {len(fields)}.",
            field=field,
        )
    minutes, hours, dom, month, dow, year = fields
    _check_items(minutes, 0, 59, (), 0, "minutes", field)
    _check_items(hours, 0, 23, (), 0, "hours", field)
    _check_items(month, 1, 12, _MONTHS, 1, "month", field)
    if (dom == "?") == (dow == "?"):
        raise Invalid(
            f"{field}: exactly one of day-of-month and day-of-week must be '?' (AWS cron takes one day rule, "
            f"e.g. '0 9 ? * MON-FRI *' or '0 9 1 * ? *').",
            field=field,
        )
    if dom != "?":
        for item in dom.split(","):
            if item == "L" or (item.endswith("W") and item[:-1].isdigit()):
                if item != "L":
                    _number(item[:-1], 1, 31, (), 1, "day-of-month", field)
                continue
            if item == "LW":
                raise Invalid(f"{field}: 'LW' is not supported here; use 'L' or a day number with W.", field=field)
            _check_items(item, 1, 31, (), 1, "day-of-month", field)
    if dow != "?":
        for item in dow.split(","):
            if item.endswith("L") and item != "L":
                _number(item[:-1], 1, 7, _DAYS, 1, "day-of-week", field)
            elif "#" in item:
                day, _, nth = item.partition("#")
                _number(day, 1, 7, _DAYS, 1, "day-of-week", field)
                if not nth.isdigit() or not 1 <= int(nth) <= 5:
                    raise Invalid(f"{field}: the n in {item!r} (nth weekday of the month) must be 1-5.", field=field)
            elif item == "L":
                raise Invalid(f"{field}: 'L' in day-of-week needs a day, e.g. '6L' for the last Friday.", field=field)
            else:
                _check_items(item, 1, 7, _DAYS, 1, "day-of-week", field)
    if year != "*":
        _check_items(year, *_YEARS, (), 0, "year", field)
    translated = " ".join(
        [
            minutes,
            hours,
            "*" if dom == "?" else dom,
            month,
            "*" if dow == "?" else ",".join(_dow_to_croniter(i) for i in dow.split(",")),
        ]
    )
    return translated, year


def _year_allowed(year_field: str, year: int) -> bool:
    if year_field == "*":
        return True
    for item in year_field.split(","):
        base, _, step = item.partition("/")
        if base == "*":
            lo, hi = _YEARS
        elif "-" in base:
            lo, hi = (int(t) for t in base.split("-"))
        else:
            lo = int(base)
            hi = _YEARS[1] if step else lo
        if lo <= year <= hi and (year - lo) % int(step or 1) == 0:
            return True
    return False


def _first_allowed_year(year_field: str, year: int) -> int | None:
    for y in range(max(year, _YEARS[0]), _YEARS[1] + 1):
        if _year_allowed(year_field, y):
            return y
    return None


def _cron_next(spec: ScheduleSpec, after: datetime) -> datetime | None:
    expression, year_field = _translate_cron(spec.body, field="cron")
    tz = zone(spec.timezone)
    start = after.astimezone(tz)
    for _ in range(_YEARS[1] - _YEARS[0] + 2):  # every pass moves `start` into a later year
        year = _first_allowed_year(year_field, start.year)
        if year is None:
            return None
        if year > start.year:
            start = datetime(year, 1, 1, tzinfo=tz) - timedelta(seconds=1)
        candidate: datetime = croniter(expression, start).get_next(datetime)
        if _year_allowed(year_field, candidate.year):
            return candidate.astimezone(UTC)
        following = _first_allowed_year(year_field, candidate.year + 1)
        if following is None:
            return None
        start = datetime(following, 1, 1, tzinfo=tz) - timedelta(seconds=1)
    return None


def _cron_check(spec: ScheduleSpec, *, now: datetime, field: str) -> None:
    try:
        _translate_cron(spec.body, field=field)
        upcoming = _cron_next(spec, now)
    except Invalid:
        raise
    except Exception as e:  # croniter's own verdict on something the checks above let through
        raise Invalid(f"{field} {spec.body!r} is not a valid cron expression: {e}.", field=field) from e
    if upcoming is None:
        raise Invalid(f"{field} {spec.body!r} never runs again; check its year field.", field=field)


# --- evaluation -------------------------------------------------------------------------------------------


def next_run(spec: ScheduleSpec, *, after: datetime, anchor: datetime) -> datetime | None:
    """The first run strictly after `after` (UTC), or None when there is none.

    `anchor` is when the schedule was made (or its start date): a rate counts its intervals from there.
    """
    if spec.kind == "at":
        when = _at_time(spec.body, "at").replace(tzinfo=zone(spec.timezone)).astimezone(UTC)
        return when if when > after else None
    if spec.kind == "rate":
        period = _rate_seconds(spec.body, field="rate")
        elapsed = (after - anchor).total_seconds()
        n = max(1, int(elapsed // period) + 1)
        return (anchor + timedelta(seconds=n * period)).astimezone(UTC)
    return _cron_next(spec, after)


def latest_due(spec: ScheduleSpec, *, after: datetime, now: datetime, anchor: datetime) -> datetime | None:
    """The last run in (after, now], or None when nothing is due: runs missed while nothing was watching are
    folded into one, rather than fired in a burst."""
    due = next_run(spec, after=after, anchor=anchor)
    if due is None or due > now:
        return None
    if spec.kind == "rate":
        period = _rate_seconds(spec.body, field="rate")
        n = int((now - anchor).total_seconds() // period)
        return (anchor + timedelta(seconds=n * period)).astimezone(UTC)
    for _ in range(10_000):
        following = next_run(spec, after=due, anchor=anchor)
        if following is None or following > now:
            break
        due = following
    return due


def iso(when: datetime) -> str:
    """UTC, to the second, with a Z: how EventBridge Scheduler writes <aws.scheduler.scheduled-time>."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
