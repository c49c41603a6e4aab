"""Reasons worded once, said again in the reader's language.

The admission engine and the other pure cores cannot translate. Each reason they word is a
:class:`Wording`: the English text itself (a ``str``, so the engine, the API, logs and
Kubernetes Events use it exactly as before) that also keeps the template it was made from
and the values put into it. The portal says it again in the reader's language with
``gettext(template) % params`` (``i18n.said``); the cycle
stores ``to_json()`` next to the English text.

Templates use named placeholders and are marked for extraction by the two markers below:
``makemessages`` runs xgettext with the keywords ``gettext_noop`` and ``ngettext:1,2``, so
the catalogue lists them although nothing here translates. Numbers stay numbers until
rendered (a plural form is picked for the reader's language, a duration is worded with
the reader's units); names (tenants, flavours, jobs) are data and are never translated.
Joining reasons with ``+`` or an f-string gives a plain ``str``, English only: compose
them with a template instead (``reasons.with_protection``, ``chain``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

Param: TypeAlias = "str | int | float | Wording"
Gettext = Callable[[str], str]
Ngettext = Callable[[str, str, int], str]


def gettext_noop(message: str) -> str:
    """Marks ``message`` as a template to translate (extracted by makemessages)."""
    return message


def _english_plural(singular: str, plural: str, count: int) -> str:
    return singular if count == 1 else plural


class Wording(str):
    """English text that knows how it was made: ``template % params``, where a param may
    itself be a Wording. With ``plural`` set, the template is the singular form and
    ``params["count"]`` picks the form. Equal to (and hashed like) its English text."""

    # no per-instance dict: a deep queue makes tens of thousands of these a cycle
    __slots__ = ("params", "plural", "template")

    template: str
    params: Mapping[str, Param]
    plural: str

    def __new__(
        cls, template: str, params: Mapping[str, Param] | None = None, plural: str = ""
    ) -> Wording:
        return _made(cls, template, dict(params or {}), plural)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Wording, (self.template, dict(self.params), self.plural))

    def render(self, gettext: Gettext, ngettext: Ngettext) -> str:
        """The text in the language of ``gettext`` / ``ngettext``."""
        return _render(self.template, self.params, self.plural, gettext, ngettext)

    def to_json(self) -> dict[str, Any]:
        """The one JSON form (stored as Workload.reason_args); ``parse`` reads it back."""
        data: dict[str, Any] = {
            "template": self.template,
            "params": {
                name: value.to_json() if isinstance(value, Wording) else value
                for name, value in self.params.items()
            },
        }
        if self.plural:
            data["plural"] = self.plural
        return data

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Wording | None:
        """A Wording from its JSON form; None for anything else (an old row's {})."""
        template = data.get("template")
        params = data.get("params", {})
        plural = data.get("plural", "")
        if not isinstance(template, str) or not isinstance(params, dict):
            return None
        if not isinstance(plural, str):
            return None
        values: dict[str, Param] = {}
        for name, value in params.items():
            if isinstance(value, dict):
                nested = cls.parse(value)
                if nested is None:
                    return None
                values[name] = nested
            elif isinstance(value, str | int | float) and not isinstance(value, bool):
                values[name] = value
            else:
                return None
        try:
            return cls(template, values, plural)
        except (KeyError, TypeError, ValueError):
            return None  # a template that no longer matches its stored values


def _made(cls: type[Wording], template: str, values: dict[str, Param], plural: str) -> Wording:
    """A Wording that keeps ``values`` itself (Wording() copies what it is given; the
    helpers below pass a dict made for it: a deep queue words tens of thousands a cycle)."""
    # a nested Wording is a str of its English text already: no need to render it
    # again (a reason composed of reasons would otherwise render each level twice)
    text = _english_plural(template, plural, int(values["count"])) if plural else template
    english = text % values if values else text
    self = str.__new__(cls, english)
    self.template = template
    self.params = values
    self.plural = plural
    return self


def _render(
    template: str,
    params: Mapping[str, Param],
    plural: str,
    gettext: Gettext,
    ngettext: Ngettext,
) -> str:
    values = {
        name: value.render(gettext, ngettext) if isinstance(value, Wording) else value
        for name, value in params.items()
    }
    text = ngettext(template, plural, int(params["count"])) if plural else gettext(template)
    return text % values if values else text


def ngettext(singular: str, plural: str, count: int, **params: Param) -> Wording:
    """A wording with a singular and a plural form (extracted by makemessages as a
    plural pair); ``count`` picks the form when it is rendered."""
    return _made(Wording, singular, {"count": count, **params}, plural)


def chain(template: str, parts: Sequence[str]) -> str:
    """``parts`` joined by a two-place template ``%(first)s ... %(rest)s``: a; b; c is
    template(a, template(b, c)). Lists here are short (a workload's flavour options)."""
    if not parts:
        return ""
    joined: str = parts[-1]
    for part in reversed(parts[:-1]):
        joined = _made(Wording, template, {"first": part, "rest": joined}, "")
    return joined


def wording(template: str, **params: Param) -> Wording:
    """``template`` (marked with gettext_noop at the call) with its named values."""
    return _made(Wording, template, params, "")
