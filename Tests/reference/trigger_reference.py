#!/usr/bin/python3
"""scipy and numpy: the reference SoundTriggerTests checks recd's sound-trigger DSP against.

Inputs and outputs are raw little-endian float64 (numpy's '<f8'), the output on stdout.

    trigger_reference.py filter INPUT RATE SPEC [SPEC ...]
        For each SPEC, INPUT through scipy.signal.sosfilt with the 4th-order Butterworth
        sections scipy.signal.butter(4, ..., fs=RATE, output='sos') designs, all outputs one
        after the other. SPEC: hp:F (high-pass), lp:F (low-pass), band:F1:F2 (the cascade
        of the high-pass at F1 and then the low-pass at F2, as recd filters: two separate
        designs, not butter's band-pass).

    trigger_reference.py response RATE SPEC FREQUENCY [FREQUENCY ...]
        |H| in dB of SPEC's sections at each FREQUENCY (scipy.signal.sosfreqz).

    trigger_reference.py levels INPUT RATE BLOCK SPEC|none
        INPUT (mono) filtered as `filter` does, then cut into blocks of BLOCK samples: per
        block its RMS level, 20*log10(sqrt(mean(x**2))), -160 for silence (and at least -160).

    trigger_reference.py percentile INPUT CAPACITY P [P ...]
        After each value of INPUT: numpy.percentile (default 'linear' method) of the last
        CAPACITY values (fewer at first) at each P; one row of len(P) values per input value.
"""
import sys

import numpy as np
from scipy import signal


def read(path):
    return np.fromfile(path, dtype='<f8')


def write(array):
    sys.stdout.buffer.write(np.ascontiguousarray(array, dtype='<f8').tobytes())


def sections(spec, rate):
    kind, *edges = spec.split(':')
    edges = [float(edge) for edge in edges]
    if kind == 'hp':
        return signal.butter(4, edges[0], 'highpass', fs=rate, output='sos')
    if kind == 'lp':
        return signal.butter(4, edges[0], 'lowpass', fs=rate, output='sos')
    if kind == 'band':
        return np.vstack([signal.butter(4, edges[0], 'highpass', fs=rate, output='sos'),
                          signal.butter(4, edges[1], 'lowpass', fs=rate, output='sos')])
    raise SystemExit(f'unknown filter {spec!r}')


def main(argv):
    command = argv[1]
    if command == 'filter':
        x, rate = read(argv[2]), float(argv[3])
        for spec in argv[4:]:
            write(signal.sosfilt(sections(spec, rate), x))
    elif command == 'response':
        rate, sos = float(argv[2]), sections(argv[3], float(argv[2]))
        frequencies = np.array([float(value) for value in argv[4:]])
        _, h = signal.sosfreqz(sos, worN=frequencies, fs=rate)
        write(20 * np.log10(np.abs(h)))
    elif command == 'levels':
        x, rate, block, spec = read(argv[2]), float(argv[3]), int(argv[4]), argv[5]
        if spec != 'none':
            x = signal.sosfilt(sections(spec, rate), x)
        blocks = x[:len(x) // block * block].reshape(-1, block)
        rms = np.sqrt(np.mean(blocks ** 2, axis=1))
        with np.errstate(divide='ignore'):
            write(np.maximum(-160.0, np.where(rms > 0, 20 * np.log10(rms), -160.0)))
    elif command == 'percentile':
        x, capacity = read(argv[2]), int(argv[3])
        percentiles = [float(value) for value in argv[4:]]
        rows = np.empty((len(x), len(percentiles)))
        for index in range(min(capacity - 1, len(x))):
            rows[index] = np.percentile(x[:index + 1], percentiles)
        if len(x) >= capacity:
            windows = np.lib.stride_tricks.sliding_window_view(x, capacity)
            chunk = max(1, 1_000_000 // capacity)
            for first in range(0, len(windows), chunk):
                part = windows[first:first + chunk]
                rows[capacity - 1 + first:capacity - 1 + first + len(part)] = np.percentile(part, percentiles, axis=1).T
        write(rows)
    else:
        raise SystemExit(f'unknown command {command!r}')


if __name__ == '__main__':
    main(sys.argv)
