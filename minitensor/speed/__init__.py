"""The speed layer: what makes the reference engine fast, kept apart from it.

- :mod:`~minitensor.speed.cpu`: the NumPy routes, registered against the reference ops
  (:mod:`minitensor.routes`) when it is imported (``import minitensor`` does);
- :mod:`~minitensor.speed.rows`: the row reductions and row-by-row passes they use;
- :mod:`~minitensor.speed.products`: matrix products and bias additions the fast way per device.

The reference ops compute the same results without any of it: ``minitensor.routes.off()`` (or
``MINITENSOR_ROUTES=off``) runs them alone.
"""
