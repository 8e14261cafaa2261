#!/usr/bin/python3
"""Local clock readings as instants, from Python's zoneinfo (the IANA database), the reference
ScheduleTests checks CalendarZone's daylight-saving rules against.

    zone_times.py ZONE YEAR "YYYY-MM-DD HH:MM:SS" ...

Prints the zone's offset changes in YEAR, one per line, "transition UNIX_SECONDS OFFSET"
(OFFSET: seconds east of UTC from then on), after "initial OFFSET" (in force on January 1),
then for each reading "reading YYYY-MM-DD HH:MM:SS UNIX_SECONDS" with PEP 495's fold=0: a
reading the clock skips is taken with the offset before the jump (02:30 becomes 03:30 when the
clock jumps from 02:00 to 03:00), a reading it shows twice is the first.
"""
import datetime
import sys
import zoneinfo


def offset(zone, seconds):
    return int(datetime.datetime.fromtimestamp(seconds, zone).utcoffset().total_seconds())


def main():
    zone = zoneinfo.ZoneInfo(sys.argv[1])
    year = int(sys.argv[2])
    start = int(datetime.datetime(year, 1, 1, tzinfo=datetime.timezone.utc).timestamp())
    end = int(datetime.datetime(year + 1, 1, 1, tzinfo=datetime.timezone.utc).timestamp())
    print("initial %d" % offset(zone, start))
    # Hour by hour, then down to the second where the offset changes.
    for hour in range(start, end, 3600):
        if offset(zone, hour) != offset(zone, hour + 3600):
            low, high = hour, hour + 3600
            while high - low > 1:
                middle = (low + high) // 2
                if offset(zone, middle) == offset(zone, hour):
                    low = middle
                else:
                    high = middle
            print("transition %d %d" % (high, offset(zone, high)))
    for text in sys.argv[3:]:
        reading = datetime.datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=zone, fold=0)
        print("reading %s %d" % (text, int(reading.timestamp())))


if __name__ == "__main__":
    main()
