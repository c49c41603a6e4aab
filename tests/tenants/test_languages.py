"""A person's language follows them: chosen once in the portal, it is what they see on any
browser they sign in on, and what their e-mails are written in."""

from __future__ import annotations

from typing import Any

import pytest
from django.core import mail
from django.test import Client

from tenants.languages import emails_by_language, language_for
from tenants.models import Membership, Role, UserPreference
from tenants.tasks import membership_notify
from tests.conftest import Cast
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_a_language_chosen_in_the_portal_is_remembered_for_the_next_browser(cast: Cast) -> None:
    first = Client()
    first.force_login(cast.lead)
    response = first.post("/i18n/setlang/", {"language": "zh-hans", "next": "/"})
    assert response.status_code == 302
    assert language_for(cast.lead) == "zh-hans"

    other_browser = Client()  # no language cookie, an English-speaking browser
    other_browser.force_login(cast.lead)
    page = other_browser.get("/", HTTP_ACCEPT_LANGUAGE="en")
    assert '<html lang="zh-hans">' in page.content.decode()
    assert page.cookies["django_language"].value == "zh-hans"
    # once the browser has its cookie, what it sends is what counts
    back = other_browser.post("/i18n/setlang/", {"language": "en", "next": "/"})
    assert back.status_code == 302
    assert '<html lang="en">' in other_browser.get("/").content.decode()
    assert language_for(cast.lead) == "en"


def test_an_unknown_language_changes_nothing_and_is_no_error(cast: Cast) -> None:
    client = Client()
    client.force_login(cast.lead)
    response = client.post("/i18n/setlang/", {"language": "tlh", "next": "/"})
    assert response.status_code == 302
    assert not UserPreference.objects.filter(user=cast.lead).exists()
    assert language_for(cast.lead) == "en"


def test_a_visitor_who_is_not_signed_in_can_switch_and_nothing_is_stored(db: Any) -> None:
    response = Client().post("/i18n/setlang/", {"language": "zh-hans", "next": "/accounts/login/"})
    assert response.status_code == 302
    assert response.cookies["django_language"].value == "zh-hans"
    assert UserPreference.objects.count() == 0


def test_a_new_role_is_announced_in_the_language_its_holder_chose(cast: Cast) -> None:
    chinese = UserFactory(username="li", email="li@example.com")
    english = UserFactory(username="sam", email="sam@example.com")
    UserPreference.objects.create(user=chinese, language="zh-hans")
    for user in (chinese, english):
        membership = Membership.objects.create(user=user, tenant=cast.team_a, role=Role.MEMBER)
        assert membership_notify(membership.pk) == 1
    to_li, to_sam = mail.outbox
    assert to_li.to == ["li@example.com"] and "Tidegate" in to_li.subject
    assert "you are now" not in to_li.subject and "成员" in f"{to_li.subject} {to_li.body}"
    assert to_sam.to == ["sam@example.com"] and "you are now" in to_sam.subject


def test_recipients_are_grouped_by_language_without_inactive_or_addressless_people(
    db: Any,
) -> None:
    li = UserFactory(username="li", email="li@example.com")
    wu = UserFactory(username="wu", email="wu@example.com")
    sam = UserFactory(username="sam", email="sam@example.com")
    gone = UserFactory(username="gone", email="gone@example.com", is_active=False)
    silent = UserFactory(username="silent", email="")
    for user in (li, wu, gone):
        UserPreference.objects.create(user=user, language="zh-hans")
    assert emails_by_language([sam, li, wu, gone, silent]) == {
        "en": ["sam@example.com"],
        "zh-hans": ["li@example.com", "wu@example.com"],
    }
