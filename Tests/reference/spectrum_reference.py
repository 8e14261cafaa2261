#!/usr/bin/python3
"""numpy and scipy: the reference SpectrumNodeTests checks recd's spectrum node against.

Input and output are raw little-endian float64 (numpy's '<f8'), the output on stdout.

    spectrum_reference.py columns INPUT RATE CHANNELS
        INPUT: interleaved 16-bit sample values (as float64), CHANNELS per frame. The channels
        are mixed to one (their mean, over 32768), and cut as recd documents it
        (doc/protocol.md, `spectrum`): a 1024-point window (scipy's periodic Hann) ends every
        512 frames once 1024 are in; a column every round(RATE * 0.05) frames is the mean of
        |rfft|^2 over the windows that ended since the column before (when none did, one ending
        at the column's last frame), in dB against (1024 / 4)^2, at least -160, to 0.1 dB.
        Prints the columns one after the other, 513 values each.
"""
import sys

import numpy as np
from scipy import signal

SIZE = 1024


def columns(path, rate, channels):
    samples = np.fromfile(path, dtype='<f8').reshape(-1, channels)
    mixed = (samples / 32768.0).mean(axis=1)
    hann = signal.get_window('hann', SIZE)  # periodic
    period = int(round(rate * 0.05))
    reference = (SIZE / 4) ** 2
    out = []
    total = np.zeros(SIZE // 2 + 1)
    windows = 0
    since_window = 0
    since_period = 0

    def window(end):
        return np.abs(np.fft.rfft(mixed[end - SIZE:end] * hann)) ** 2

    for index in range(len(mixed)):
        frames = index + 1
        since_window += 1
        since_period += 1
        if since_window >= SIZE // 2 and frames >= SIZE:
            total += window(frames)
            windows += 1
            since_window = 0
        if since_period >= period:
            if windows == 0 and frames >= SIZE:
                total += window(frames)
                windows += 1
                since_window = 0
            if windows > 0:
                mean = total / windows
                with np.errstate(divide='ignore'):
                    level = np.where(mean > 0, 10 * np.log10(mean / reference), -160.0)
                out.append(np.round(np.maximum(level, -160.0), 1))
                total = np.zeros(SIZE // 2 + 1)
                windows = 0
            since_period = 0
    return np.concatenate(out) if out else np.zeros(0)


def main():
    command, *arguments = sys.argv[1:]
    if command == 'columns':
        path, rate, channels = arguments
        result = columns(path, int(rate), int(channels))
    else:
        sys.exit(f'unknown command {command}')
    sys.stdout.buffer.write(np.ascontiguousarray(result, dtype='<f8').tobytes())


if __name__ == '__main__':
    main()
