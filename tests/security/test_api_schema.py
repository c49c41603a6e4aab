"""/api/schema/ tells the truth: schemathesis sends generated requests to every operation
it lists, as a platform admin and as a team lead on the demo data, and every answer is
documented, matches its schema and is not a server error."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from tenants.demo import seed_demo
from tests.security.conftest import auth_headers
from tests.security.schema_fuzz import fuzz

# generated requests per operation and caller: the whole run stays within a few minutes
EXAMPLES_PER_OPERATION = 12


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("username", ["admin", "vision-lead"])
def test_every_operation_answers_as_its_schema_says(username: str) -> None:
    seed_demo()
    user = get_user_model().objects.get(username=username)
    failures = fuzz(auth_headers(user), examples_per_operation=EXAMPLES_PER_OPERATION)
    assert not failures, "\n".join(str(failure) for failure in failures)
