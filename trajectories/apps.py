from django.apps import AppConfig


class TrajectoriesConfig(AppConfig):
    name = "trajectories"
    verbose_name = "Trajectories: rollouts, episodes, turns, annotations"
