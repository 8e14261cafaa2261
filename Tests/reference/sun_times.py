#!/usr/bin/python3
"""Sun times from astral, the reference ScheduleTests checks recd's SolarTimes against.

    sun_times.py YEAR LAT,LON [LAT,LON ...]

For each place, for every UTC date from two days before YEAR to two days after, one line:

    LAT,LON YYYY-MM-DD DAWN SUNRISE SUNSET DUSK

each the event's instant in Unix seconds, or "none" where astral says the sun does not reach
that altitude on that date. Astral gives the event of the solar day around the date's noon at
that longitude, which may fall on the UTC date before or after: the test files each instant
under the day it falls in, so the days on the two sides are defined the same way.

Astral 1.6 (Debian 12's python3-astral) evaluates the sun's declination and the equation of
time once, at the date's 00:00 UTC; at high latitudes near the equinoxes that alone moves
sunrise by minutes. So each event is asked again with the date and time of astral's previous
answer (astral takes a datetime for the evaluation time), twice: astral's own equations at the
event's own time, as NOAA's calculator does. Astral 2 and later (PyPI) do that themselves.
"""
import datetime
import sys

import astral

UTC = datetime.timezone.utc
EVENTS = ("dawn", "sunrise", "sunset", "dusk")


def event_v1(calculator, name, date, lat, lon):
    """Astral 1.x: *_utc(date, lat, lon), refined at the answer's own time."""
    function = getattr(calculator, name + "_utc")
    try:
        answer = function(date, lat, lon)
        for _ in range(2):
            # Evaluated at the previous answer's time: astral counts its result from that
            # datetime's date, so shift it back to `date`'s.
            when = answer.replace(tzinfo=None)
            again = function(when, lat, lon)
            answer = again + datetime.timedelta(days=(date - when.date()).days)
    except astral.AstralError:
        return None
    return answer


def event_v2(name, date, lat, lon):
    import astral.sun
    try:
        return getattr(astral.sun, name)(astral.Observer(lat, lon), date=date, tzinfo=UTC)
    except ValueError:
        return None


def main():
    year = int(sys.argv[1])
    places = [tuple(float(x) for x in arg.split(",")) for arg in sys.argv[2:]]
    calculator = astral.Astral() if hasattr(astral, "Astral") else None
    first = datetime.date(year, 1, 1) - datetime.timedelta(days=2)
    last = datetime.date(year, 12, 31) + datetime.timedelta(days=2)
    out = []
    for lat, lon in places:
        date = first
        while date <= last:
            fields = []
            for name in EVENTS:
                if calculator is not None:
                    answer = event_v1(calculator, name, date, lat, lon)
                else:
                    answer = event_v2(name, date, lat, lon)
                fields.append("none" if answer is None else "%.0f" % answer.timestamp())
            out.append("%g,%g %s %s" % (lat, lon, date.isoformat(), " ".join(fields)))
            date += datetime.timedelta(days=1)
    print("\n".join(out))


if __name__ == "__main__":
    main()
