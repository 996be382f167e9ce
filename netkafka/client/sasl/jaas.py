"""Java ``sasl.jaas.config`` strings, as Spark and Java-style properties pass SASL
credentials::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="alice" password="s3cr\\"et";

One entry is ``<login module class> <control flag> (<option>=<value>)* ;``.  The
tokens follow Kafka's own parser (JaasConfig, a java.io.StreamTokenizer): whitespace is
any character up to the space; ``;`` and ``=`` stand alone; values are bare words or
quoted with ``"`` or ``'``, where a backslash escapes the next character (``\\n``,
``\\t``, ``\\r``, ``\\b``, ``\\f``, ``\\v``, ``\\a`` and up to three octal digits as in
Java, any other character as itself); ``/`` starts a comment (``//`` and ``/* */``
too), so a value with a slash must be quoted.  The control flag is one of required,
requisite, sufficient and optional, in any case.

Stricter than Java, so that a typo is an error instead of a silent surprise: a quote
left open, and an option given twice, are refused.  Errors name the position and the
option, never a value (values are passwords).
"""
from dataclasses import dataclass

from netkafka.errors import JaasConfigError

SETTING = "sasl.jaas.config"
CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")
# The login module each mechanism's credentials are read from, by its simple class
# name, so that relocated copies (e.g. kafkashaded.org.apache.kafka...) match too.
LOGIN_MODULES = {
    "PLAIN": "PlainLoginModule",
    "SCRAM-SHA-256": "ScramLoginModule",
    "SCRAM-SHA-512": "ScramLoginModule",
}
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_OCTAL = "01234567"
_SPECIAL = ";=\"'/"


@dataclass(frozen=True)
class JaasEntry:
    """One login module entry of a sasl.jaas.config string."""

    login_module: str  # the class name as written
    control_flag: str  # lower case: one of CONTROL_FLAGS
    options: dict  # option name -> value, both str

    @property
    def module_name(self):
        """The login module's simple class name (after the last dot)."""
        return self.login_module.rsplit(".", 1)[-1]


class _Token:
    __slots__ = ("kind", "text", "position")

    def __init__(self, kind, text, position):
        self.kind = kind  # "word", "quoted", ";" or "="
        self.text = text
        self.position = position  # 1-based character position, for errors


def _fail(message, position=None):
    where = "" if position is None else f" at character {position}"
    return JaasConfigError(f"{SETTING}{where}: {message}")


def _tokens(text):
    """The tokens of ``text``; comments and whitespace dropped."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c <= " ":
            i += 1
        elif c == "/":
            if text.startswith("/*", i):
                end = text.find("*/", i + 2)
                if end < 0:
                    raise _fail("a /* comment is not closed", i + 1)
                i = end + 2
            else:  # '//' or a lone '/': to the end of the line
                end = min((p for p in (text.find("\n", i), text.find("\r", i)) if p >= 0),
                          default=n)
                i = end
        elif c in ";=":
            yield _Token(c, c, i + 1)
            i += 1
        elif c in "\"'":
            value, i = _quoted(text, i)
            yield value
        else:
            start = i
            while i < n and text[i] > " " and text[i] not in _SPECIAL:
                i += 1
            yield _Token("word", text[start:i], start + 1)


def _quoted(text, start):
    """The quoted string opening at ``start``, and the index after its closing quote."""
    quote, i, n, out = text[start], start + 1, len(text), []
    while i < n:
        c = text[i]
        if c == quote:
            return _Token("quoted", "".join(out), start + 1), i + 1
        if c in "\r\n":
            break
        if c == "\\" and i + 1 < n:
            c = text[i + 1]
            i += 2
            if c in _OCTAL:
                # Java: up to three octal digits, three only when the first is 0-3.
                digits, limit = c, 3 if c <= "3" else 2
                while len(digits) < limit and i < n and text[i] in _OCTAL:
                    digits += text[i]
                    i += 1
                out.append(chr(int(digits, 8)))
            else:
                out.append(_ESCAPES.get(c, c))
            continue
        out.append(c)
        i += 1
    raise _fail(f"the {quote} quote opened here is not closed on its line", start + 1)


def parse_jaas_config(text):
    """The entries of a sasl.jaas.config string.

    Raises:
        JaasConfigError: naming the position and what is wrong.
    """
    if not isinstance(text, str):
        raise JaasConfigError(f"{SETTING} must be a str, not {type(text).__name__}")
    tokens = _tokens(text)
    entries = []
    for token in tokens:
        if token.kind != "word":
            raise _fail(f"expected a login module class name, found {token.text!r}"
                        if token.kind != "quoted" else
                        "expected a login module class name, found a quoted string",
                        token.position)
        entries.append(_entry(token, tokens))
    if not entries:
        raise _fail("no login module (expected e.g. 'org.apache.kafka.common.security."
                    "plain.PlainLoginModule required username=\"...\" password=\"...\";')")
    return entries


def _entry(module, tokens):
    flag = next(tokens, None)
    if flag is None or flag.kind != "word":
        raise _fail(f"login module {module.text} needs a control flag "
                    f"({', '.join(CONTROL_FLAGS)})", module.position if flag is None else
                    flag.position)
    if flag.text.lower() not in CONTROL_FLAGS:
        raise _fail(f"{flag.text!r} is not a control flag; expected one of "
                    f"{', '.join(CONTROL_FLAGS)}", flag.position)
    options = {}
    for key in tokens:
        if key.kind == ";":
            return JaasEntry(module.text, flag.text.lower(), options)
        if key.kind not in ("word", "quoted"):
            raise _fail(f"expected an option name or ';', found {key.text!r}", key.position)
        equals = next(tokens, None)
        if equals is None or equals.kind != "=":
            raise _fail(f"option {key.text!r} needs '=' and a value",
                        key.position if equals is None else equals.position)
        value = next(tokens, None)
        if value is None or value.kind not in ("word", "quoted"):
            raise _fail(f"option {key.text!r} has no value", equals.position)
        if key.text in options:
            raise _fail(f"option {key.text!r} is given twice", key.position)
        options[key.text] = value.text
    raise _fail(f"the entry of {module.text} is not ended by ';'")


def credentials_from_jaas(text, mechanism):
    """The ``(username, password)`` of a PLAIN or SCRAM sasl.jaas.config string.

    Args:
        text: the sasl.jaas.config value: one entry of the mechanism's login module.
        mechanism: the sasl.mechanism it is used with (PLAIN, SCRAM-SHA-256/512).

    Raises:
        JaasConfigError: the string does not parse, has more than one entry (Kafka's
            clients take exactly one), names another mechanism's login module, asks
            for delegation token authentication (tokenauth), or lacks a non-empty
            username or password.
    """
    expected = LOGIN_MODULES.get(mechanism)
    if expected is None:
        raise JaasConfigError(
            f"{SETTING}: usernames and passwords are read for "
            f"{', '.join(sorted(LOGIN_MODULES))}, not for sasl.mechanism={mechanism!r}")
    entries = parse_jaas_config(text)
    if len(entries) != 1:
        raise JaasConfigError(f"{SETTING} has {len(entries)} login modules; a client takes "
                              f"exactly one")
    entry = entries[0]
    if entry.module_name != expected:
        raise JaasConfigError(
            f"{SETTING} names {entry.login_module}, but sasl.mechanism={mechanism!r} needs "
            f"{expected}")
    if entry.options.get("tokenauth", "").lower() == "true":  # Java's Boolean.parseBoolean
        # Java's ScramLoginModule then sends the tokenauth extension and the broker
        # checks a delegation token, which netkafka does not: sent as a password, the
        # token would only be refused as a wrong one.
        raise JaasConfigError(
            f"{SETTING}: tokenauth (delegation token authentication) is not supported; "
            f"authenticate with a SCRAM user's username and password")
    missing = [name for name in ("username", "password") if not entry.options.get(name)]
    if missing:
        raise JaasConfigError(
            f"{SETTING}: {entry.module_name} needs a non-empty "
            f"{' and '.join(missing)} option ({', '.join(missing)}=\"...\")")
    return entry.options["username"], entry.options["password"]
