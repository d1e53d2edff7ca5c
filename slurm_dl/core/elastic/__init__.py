"""Elastic jobs: the planner that sizes jobs running on a range of GPUs (pure)."""

from .planner import Decision, ElasticJob, ElasticSettings, may_grow, plan

__all__ = ["Decision", "ElasticJob", "ElasticSettings", "may_grow", "plan"]
