"""Every exported name in one place: metric names, label names, rule and dashboard identifiers.

The exporter, the alert renderer, the dashboards and the Argo templates import these constants, so a
renamed metric cannot silently break a consumer. One module per area, all re-exported here.
"""

from observer.conventions.labels import *  # noqa: F403
from observer.conventions.metrics import *  # noqa: F403
