"""The schedule rules: what the API and tools accept, and when a schedule runs next (what the local clock fires)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from oberik.domain import schedules
from oberik.domain.errors import Invalid

NOW = datetime(2026, 11, 30, 11, 0, 0, tzinfo=UTC)  # a Monday


def parse(**kw: str) -> schedules.ScheduleSpec:
    return schedules.parse(now=NOW, **kw)


def refusal(**kw: str) -> str:
    with pytest.raises(Invalid) as caught:
        parse(**kw)
    return caught.value.detail


def test_at_is_a_wall_time_in_its_time_zone():
    spec = parse(at="2026-12-01T09:00:00", timezone="Europe/Paris")
    assert spec.expression == "at(2026-12-01T09:00:00)" and spec.timezone == "Europe/Paris" and spec.one_time
    assert schedules.next_run(spec, after=NOW, anchor=NOW) == datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def test_at_with_an_offset_is_converted_to_the_schedules_time_zone():
    spec = parse(at="2026-12-01T09:00:00Z", timezone="Asia/Tokyo")
    assert spec.expression == "at(2026-12-01T18:00:00)"
    assert parse(at="at(2026-12-01T09:00:00)").expression == "at(2026-12-01T09:00:00)"


def test_an_at_in_the_past_is_refused_with_the_time_it_is_there():
    detail = refusal(at="2026-11-30T11:30:00", timezone="Europe/Paris")  # 10:30 UTC
    assert "in the past" in detail and "2026-11-30T12:00:00+01:00" in detail


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"at": "tomorrow"}, "is not a date and time"),
        ({"rate": "5 minutes", "timezone": "Mars/Olympus"}, "not a time zone this platform knows"),
        ({"rate": "1 minutes"}, "write '1 minute'"),
        ({"rate": "5 minute"}, "write '5 minutes'"),
        ({"rate": "0 minutes"}, "at least 1 minute"),
        ({"rate": "every hour"}, "is not a rate"),
        ({"cron": "0 9 * * MON-FRI"}, "must have six fields"),
        ({"cron": "0 9 * * * *"}, "exactly one of day-of-month and day-of-week must be '?'"),
        ({"cron": "61 9 ? * 2 *"}, "minutes must be between 0 and 59"),
        ({"cron": "0 9 ? * 8 *"}, "day-of-week must be between 1 and 7"),
        ({"cron": "0 9 1 * ? 2020"}, "never runs again"),
        ({"cron": "0 9 31 2 ? *"}, "not a valid cron expression"),
        ({}, "exactly one of at"),
        ({"at": "2026-12-01T09:00:00", "rate": "1 hour"}, "it has at and rate"),
    ],
)
def test_bad_schedules_are_refused_with_a_sentence(kw: dict[str, str], words: str):
    assert words in refusal(**kw)


def test_cron_reads_aws_day_of_week_numbers_from_sunday():
    # AWS: 2-6 is Monday to Friday (1 is Sunday); the next run after Monday 11:00 UTC is Tuesday 09:00
    spec = parse(cron="0 9 ? * 2-6 *")
    assert schedules.next_run(spec, after=NOW, anchor=NOW) == datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    sunday = parse(cron="cron(0 9 ? * 1 *)")
    assert schedules.next_run(sunday, after=NOW, anchor=NOW) == datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


def test_cron_understands_last_and_nth_weekdays_and_years():
    last_friday = parse(cron="0 18 ? * 6L *")
    assert schedules.next_run(last_friday, after=NOW, anchor=NOW) == datetime(2026, 12, 25, 18, 0, tzinfo=UTC)
    first_monday = parse(cron="0 9 ? * MON#1 *")
    assert schedules.next_run(first_monday, after=NOW, anchor=NOW) == datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
    in_2028 = parse(cron="0 9 1 * ? 2028")
    assert schedules.next_run(in_2028, after=NOW, anchor=NOW) == datetime(2028, 1, 1, 9, 0, tzinfo=UTC)


def test_cron_follows_its_time_zone_across_a_daylight_saving_change():
    spec = schedules.parse(cron="0 9 ? * * *", timezone="Europe/Paris", now=datetime(2027, 3, 27, 12, tzinfo=UTC))
    saturday = schedules.next_run(spec, after=datetime(2027, 3, 26, 12, tzinfo=UTC), anchor=NOW)
    sunday = schedules.next_run(spec, after=saturday, anchor=NOW)  # type: ignore[arg-type]
    assert saturday == datetime(2027, 3, 27, 8, 0, tzinfo=UTC)  # 09:00 CET
    assert sunday == datetime(2027, 3, 28, 7, 0, tzinfo=UTC)  # 09:00 CEST


def test_a_rate_counts_from_when_the_schedule_was_made():
    spec = parse(rate="rate(15 minutes)")
    made = NOW - timedelta(minutes=20)
    assert schedules.next_run(spec, after=NOW, anchor=made) == made + timedelta(minutes=30)


def test_runs_missed_while_nobody_looked_are_folded_into_the_last_one():
    spec = parse(rate="1 minute")
    due = schedules.latest_due(spec, after=NOW, now=NOW + timedelta(minutes=10, seconds=5), anchor=NOW)
    assert due == NOW + timedelta(minutes=10)
    hourly = parse(cron="0 * ? * * *")
    assert schedules.latest_due(hourly, after=NOW, now=NOW + timedelta(hours=3, minutes=1), anchor=NOW) == (
        NOW + timedelta(hours=3)
    )
    assert schedules.latest_due(hourly, after=NOW, now=NOW + timedelta(minutes=59), anchor=NOW) is None


def test_a_one_time_schedule_has_no_run_after_it_ran():
    spec = parse(at="2026-12-01T09:00:00")
    ran = schedules.next_run(spec, after=NOW, anchor=NOW)
    assert ran is not None and schedules.next_run(spec, after=ran, anchor=NOW) is None


def test_what_the_scheduler_holds_reads_back_the_same():
    for spec in (
        parse(at="2026-12-01T09:00:00", timezone="Europe/Paris"),
        parse(cron="0 9 ? * 2-6 *"),
        parse(rate="2 hours"),
    ):
        assert schedules.from_expression(spec.expression, spec.timezone) == spec
