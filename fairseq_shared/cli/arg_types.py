"""argparse types for the tools' numeric flags: each refuses a value out of range while the
command line is parsed, before any work, with argparse's one-line error naming the flag
(``argument --threshold: 2.0 is not in [0, 1]``)."""

import argparse
import math


def unit_interval(text: str) -> float:
    """A number in [0, 1] (a similarity threshold); nan and inf refused."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number; allowed: 0 to 1") from None
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not in [0, 1]; allowed: 0 to 1")
    return value


def unit_interval_list(text: str) -> list:
    """Comma-separated numbers, each in [0, 1] (``0.7,0.8,0.9``)."""
    return [unit_interval(part) for part in text.split(",")]


def _int_at_least(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer; allowed: >= {least}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{value} is out of range; allowed: an integer >= {least}")
    return value


def int_at_least(least: int):
    """The type of an integer flag whose values start at ``least`` (``--vocab``: a joint
    dictionary holds fairseq's 4 special symbols)."""

    def parse(text: str) -> int:
        return _int_at_least(text, least)

    parse.__name__ = f"int_at_least_{least}"
    return parse


def positive_int(text: str) -> int:
    """An integer >= 1 (a count: sentences, tokens, sets, rounds, updates)."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """An integer >= 0 (a count that may be none: busy processes beside a run)."""
    return _int_at_least(text, 0)


def positive_int_list(text: str) -> list:
    """Comma-separated integers >= 1 (thread counts: ``1,2``)."""
    return [positive_int(part) for part in text.split(",")]


def non_negative_int_list(text: str) -> list:
    """Comma-separated integers >= 0 (``0,1,2``)."""
    return [non_negative_int(part) for part in text.split(",")]


#: ``--subset`` means one thing in every command that has it: a split of the data directory, as
#: fairseq names them (its ``--gen-subset``, ``--valid-subset``); a number of sentences is
#: ``--sentences`` (time_generate, export).
SUBSET_HELP = ("split of the data directory to read, as fairseq names them (train, valid, "
               "test ...; default: %(default)s)")
