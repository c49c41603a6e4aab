"""Pieces the billing models share: currency codes and write-once rows."""

from __future__ import annotations

from typing import Any, TypeVar

from django.core.validators import RegexValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

CURRENCY = RegexValidator(
    regex=r"^[A-Z]{3}$",
    message=_("Use a three-letter ISO 4217 currency code in capitals, e.g. 'USD' or 'EUR'."),
    code="currency",
)

_M = TypeVar("_M", bound=models.Model)


class WriteOnceQuerySet(models.QuerySet[_M]):
    """A queryset that inserts but never updates or deletes (raises the model's error).

    Closed statements and the usage ledger are records of what happened: corrections are
    new rows that point to what they correct, never edits.
    """

    def update(self, **kwargs: Any) -> int:
        raise self.model.write_once_error(  # type: ignore[attr-defined]
            f"{self.model._meta.verbose_name_plural} are never changed once written"
        )

    def delete(self) -> tuple[int, dict[str, int]]:
        raise self.model.write_once_error(  # type: ignore[attr-defined]
            f"{self.model._meta.verbose_name_plural} are never deleted"
        )


class WriteOnceModel(models.Model):
    """Refuses ``save()`` of an existing row and ``delete()`` at the model layer."""

    write_once_error: type[Exception] = RuntimeError

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise self.write_once_error(
                f"{self._meta.verbose_name} {self.pk} is frozen: it is never changed once "
                "written; record a correction in the open period instead"
            )
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise self.write_once_error(
            f"{self._meta.verbose_name} {self.pk} is frozen: it is never deleted; record a "
            "correction in the open period instead"
        )
