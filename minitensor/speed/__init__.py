"""The speed layer: what makes the reference engine fast, kept apart from it.

- :mod:`~minitensor.speed.gpu` and :mod:`~minitensor.speed.cpu`: the routes of the hand-written
  CUDA kernels and of NumPy, registered against the reference ops (:mod:`minitensor.routes`)
  when imported (``import minitensor`` does);
- :mod:`~minitensor.speed.rows`: the row reductions and row-by-row passes they use;
- :mod:`~minitensor.speed.products`: matrix products and bias additions the fast way per device.

The reference ops compute the same results without any of it: ``minitensor.routes.off()`` (or
``MINITENSOR_ROUTES=off``) runs them alone.
"""
