"""The engine's errors, each naming what went wrong and, where there is one, the fix."""


class ShapeError(ValueError):
    """An op got inputs whose shapes, dtypes or values it cannot take."""


class GraphError(RuntimeError):
    """The graph cannot be differentiated (freed, or nothing requires grad)."""


class DeviceError(RuntimeError):
    """A device is unavailable, unknown, or two devices were mixed in one op."""
