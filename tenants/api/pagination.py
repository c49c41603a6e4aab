"""The API's page-number pagination, without a COUNT query for lists that fit one page.

Django's paginator counts the rows before it reads a page. Most lists a caller sees (its
tenants, quotas, budgets, a team's queue) fit the first page, so the first page is read
with one row more than a page holds: when that extra row is not there, the count is the
rows read and no COUNT runs. A longer list is counted as before. Responses are the same
(``count``, ``next``, ``previous``, ``results``).
"""

from __future__ import annotations

from typing import Any

from django.core.paginator import Page, Paginator
from rest_framework.pagination import PageNumberPagination


class FirstPageCountingPaginator(Paginator):
    def page(self, number: Any) -> Page:
        if str(number) == "1" and "count" not in self.__dict__:
            rows = list(self.object_list[: self.per_page + 1])
            if len(rows) <= self.per_page:
                self.__dict__["count"] = len(rows)  # fills the cached_property
                return Page(rows, 1, self)
        return super().page(number)


class ApiPagination(PageNumberPagination):
    django_paginator_class = FirstPageCountingPaginator
