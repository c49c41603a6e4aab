from django.urls import path

from dashboard import views

urlpatterns = [
    path("dashboard/", views.dashboard_home, name="dashboard-home"),
    path("dashboard/<slug:slug>/", views.dashboard, name="dashboard"),
    path("dashboard/<slug:slug>/parts/<slug:part>/", views.dashboard_part, name="dashboard-part"),
]
