"""Powering idle GPU nodes down ahead of demand: the forecast (``forecast``), the decision
(``decision``) and the replay of a recorded demand series through them (``replay``). Pure."""

from __future__ import annotations

from .decision import POWERED, NodeState, Power, PowerDecision, decide
from .forecast import DemandModel, fit_demand_model, forecast_peak, nodes_for, trend_of

__all__ = [
    "POWERED",
    "DemandModel",
    "NodeState",
    "Power",
    "PowerDecision",
    "decide",
    "fit_demand_model",
    "forecast_peak",
    "nodes_for",
    "trend_of",
]
