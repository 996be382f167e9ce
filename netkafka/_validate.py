"""The checks of integer, duration and enumerated settings, in one wording for every layer.

Producer(), ConnectionConfig, the Sender, the metadata cache, the I/O pool, the
backoff and partitioner options and the Spark sink all take such settings; each
refusal names the setting, what it allows and the value given, the same way
wherever it is raised.

It imports nothing of netkafka, so that any layer may use it: the client layer,
below config, checks its own settings with it.
"""
import math


def check_int(name, value, minimum, maximum=None, *, minimum_text=None, none_allowed=False):
    """value, if it is an int (a bool is not) from minimum to maximum, or None when
    none_allowed.

    Args:
        name: the setting, as the message names it.
        minimum, maximum: the bounds, inclusive; maximum None for none.
        minimum_text: the minimum as the message says it, where it comes from
            another setting ("batch_size (16384)").

    Raises:
        ValueError: "<name> must be an int >= <minimum>[ and <= <maximum>][ or None],
            got <value>".
    """
    if value is None and none_allowed:
        return value
    if (isinstance(value, bool) or not isinstance(value, int) or value < minimum
            or (maximum is not None and value > maximum)):
        allowed = f"an int >= {minimum_text or minimum}"
        if maximum is not None:
            allowed += f" and <= {maximum}"
        if none_allowed:
            allowed += " or None"
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return value


def check_ms(name, value, minimum, maximum=None, *, fraction_kept=False):
    """value, a duration in milliseconds, as the setting keeps it: an int, or a finite
    float (a bool is not) from minimum to maximum -- kafka-python takes floats, doing
    arithmetic on them.  A whole float is its int (30000.0 is 30000); a fraction is
    kept where fraction_kept (the setting is used in nanoseconds: 0.5 is half a
    millisecond), else rounded up to the next millisecond, where it is used in whole
    ones (on the wire, in the layers below): a wait never shorter than asked.

    Raises:
        ValueError: "<name> must be an int or a finite float >= <minimum>[ and <=
            <maximum>] (milliseconds), got <value>".
    """
    number = (isinstance(value, (int, float)) and not isinstance(value, bool)
              and math.isfinite(value) and value >= minimum
              and (maximum is None or value <= maximum))
    if not number:
        allowed = f"an int or a finite float >= {minimum}"
        if maximum is not None:
            allowed += f" and <= {maximum}"
        raise ValueError(f"{name} must be {allowed} (milliseconds), got {value!r}")
    if isinstance(value, int) or (fraction_kept and not value.is_integer()):
        return value
    return math.ceil(value)


def check_choice(name, value, choices, others=()):
    """value, if it is one of choices, of the same type as well as equal (True is not
    1, 1.0 is not 1).

    Args:
        name: the setting, as the message names it.
        choices: the values allowed.
        others: what else the caller takes, described ("a callable"), for the
            message only: the caller has accepted those before calling.

    Raises:
        ValueError: "<name> must be <choice>, <choice> or <other>, got <value>".
    """
    for choice in choices:
        if type(value) is type(choice) and value == choice:
            return value
    allowed = [repr(choice) for choice in choices] + list(others)
    listed = allowed[0] if len(allowed) == 1 else f"{', '.join(allowed[:-1])} or {allowed[-1]}"
    raise ValueError(f"{name} must be {listed}, got {value!r}")
