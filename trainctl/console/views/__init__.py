"""The console's pages as data: pure functions from what the ledger, the history index, the quota pools and the Model
Registry hold to the rows a template shows. The figures are the ones trainctl already computes (trainctl/jobs.py's
summary, trainctl/report.py's report, functions/capacity/fair_share.py's verdict, trainctl/curve.py's parsing);
nothing here reads or writes anything. Every text a requester or job wrote passes through as it is: the templates
escape it. One module per page (now, request, history, models) and what they share (common); the names are
gathered here, so that the app and the tests say `views.<name>`."""

from trainctl.console.views.common import MAX_TEXT, MAX_TITLE, clipped, duration, figure_text, money, team_of, title_of
from trainctl.console.views.history import (
    PAGE_SIZE,
    Paged,
    history_charts,
    history_page,
    latest_first,
    visible_outcomes,
)
from trainctl.console.views.models import model_metric, model_visible, models_view, traffic_of, version_metrics
from trainctl.console.views.now import (
    HELD_BY_WORDS,
    ActiveRow,
    QueueRow,
    TeamRow,
    active_rows,
    cost_so_far,
    in_state_since,
    live_item,
    pool_limits_wanted,
    queue_rows,
    rung_in_words,
    running_since,
    team_rows,
)
from trainctl.console.views.request import (
    CURVE_SERIES,
    MAX_METRICS_SHOWN,
    Curve,
    Step,
    cloud_logs_url,
    curve_of,
    metric_rows,
    request_view,
    timeline,
)

__all__ = [
    "CURVE_SERIES",
    "HELD_BY_WORDS",
    "MAX_METRICS_SHOWN",
    "MAX_TEXT",
    "MAX_TITLE",
    "PAGE_SIZE",
    "ActiveRow",
    "Curve",
    "Paged",
    "QueueRow",
    "Step",
    "TeamRow",
    "active_rows",
    "clipped",
    "cloud_logs_url",
    "cost_so_far",
    "curve_of",
    "duration",
    "figure_text",
    "history_charts",
    "history_page",
    "in_state_since",
    "latest_first",
    "live_item",
    "metric_rows",
    "model_metric",
    "model_visible",
    "models_view",
    "money",
    "pool_limits_wanted",
    "queue_rows",
    "request_view",
    "rung_in_words",
    "running_since",
    "team_of",
    "team_rows",
    "timeline",
    "title_of",
    "traffic_of",
    "version_metrics",
    "visible_outcomes",
]
