"""What a service refuses reads in the user's language: in the portal's forms (keeping
what was typed) and in the API, which answers in English unless asked otherwise."""

from __future__ import annotations

import html

import pytest

from tenants.errors import ValidationFailed
from tenants.models import Membership
from tests.conftest import Cast, client_for
from tests.factories import BindingFactory
from tests.tenants.test_portal import logged_in

pytestmark = pytest.mark.django_db


def test_binding_a_bound_namespace_is_refused_in_chinese_in_the_portal(cast: Cast) -> None:
    BindingFactory(tenant=cast.team_b, cluster_name="c1", namespace="taken")
    response = logged_in(cast.lead).post(
        "/tenants/vision/bindings/add/",
        {"cluster_name": "c1", "namespace": "taken"},
        HTTP_ACCEPT_LANGUAGE="zh-hans",
    )
    assert response.status_code == 400
    page = html.unescape(response.content.decode())
    assert "集群 c1 上的命名空间 taken 已被绑定。一个命名空间只属于一个租户" in page
    assert "already bound" not in page
    assert 'value="taken"' in page  # what was typed is kept


def test_adding_a_user_who_does_not_exist_is_refused_in_chinese(cast: Cast) -> None:
    response = logged_in(cast.lead).post(
        "/tenants/vision/members/add/",
        {"username": "ghost", "role": "member"},
        HTTP_ACCEPT_LANGUAGE="zh-hans",
    )
    assert response.status_code == 400
    page = html.unescape(response.content.decode())
    assert "没有名为“ghost”的有效用户。" in page and "No active user" not in page
    assert 'value="ghost"' in page


def test_the_same_refusal_reads_in_english_for_an_english_reader(cast: Cast) -> None:
    response = logged_in(cast.lead).post(
        "/tenants/vision/members/add/",
        {"username": "ghost", "role": "member"},
        HTTP_ACCEPT_LANGUAGE="en",
    )
    assert response.status_code == 400
    assert "No active user named 'ghost'." in html.unescape(response.content.decode())


def test_the_api_answers_in_english_unless_asked_for_chinese(cast: Cast) -> None:
    member = cast.member.username
    body = {"tenant": "vision", "user": member, "role": "member"}
    client = client_for(cast.lead)
    english = client.post("/api/v1/memberships/", body, format="json")
    assert english.status_code == 422
    assert english.json()["user"] == [
        f"{member} is already a member of vision; change the existing membership's role instead."
    ]
    chinese = client.post(
        "/api/v1/memberships/", body, format="json", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert chinese.status_code == 422
    assert chinese.json()["user"] == [f"{member} 已是 vision 的成员；请改为修改其现有成员角色。"]
    assert Membership.objects.filter(user=cast.member).count() == 1


def test_an_error_logs_in_english_and_reads_in_the_active_language() -> None:
    from django.utils import translation
    from django.utils.translation import gettext_lazy

    with translation.override("zh-hans"):
        error = ValidationFailed(
            gettext_lazy("No active user named '%(username)s'."),
            params={"username": "ghost"},
            field="user",
        )
        assert error.message == "没有名为“ghost”的有效用户。"
        assert error.as_dict() == {"user": ["没有名为“ghost”的有效用户。"]}
    assert str(error) == "No active user named 'ghost'."
    with translation.override("en"):
        assert error.message == "No active user named 'ghost'."
    assert ValidationFailed("plain text stays as it is").message == "plain text stays as it is"
