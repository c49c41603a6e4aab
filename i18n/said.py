"""Worded text said in the reader's language (Django's active language): the portal's
filters, the API's errors and form errors all say a :class:`~i18n.wording.Wording` here."""

from __future__ import annotations

from django.utils.functional import lazy
from django.utils.translation import gettext, ngettext

from i18n.wording import Wording


def say(wording: Wording) -> str:
    """A reason the engine worded, in the active language."""
    return wording.render(gettext, ngettext)


# ``say`` when the text is read, not when it is made: for a domain error's message,
# which its str() renders in English and the API and the portal in the reader's language.
def _say_text(text: str) -> str:
    return say(text) if isinstance(text, Wording) else text


say_when_read = lazy(_say_text, str)
