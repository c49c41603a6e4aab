from django.apps import AppConfig


class SchedulerBridgeConfig(AppConfig):
    name = "scheduler_bridge"
