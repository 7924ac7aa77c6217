"""Module: a container of parameters, buffers and sub-modules, registered by attribute."""
from __future__ import annotations

from collections import OrderedDict
from typing import Iterator


from .. import backend
from ..tensor import Tensor


class Parameter(Tensor):
    """A tensor that a Module registers as a trainable weight (requires grad by default)."""

    __slots__ = ()

    def __init__(self, data, requires_grad: bool = True, dtype=None):
        super().__init__(data, requires_grad=requires_grad, dtype=dtype)

    def __repr__(self) -> str:
        return "Parameter(" + super().__repr__() + ")"


class Module:
    """Base class of layers and models.

    Assigning a :class:`Parameter` or a Module to an attribute registers it (in order);
    ``register_buffer`` registers a tensor that is state but not trained (e.g. a table of
    positional encodings). Subclasses call ``super().__init__()`` first and define ``forward``.
    """

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_persistent", set())
        object.__setattr__(self, "training", True)

    # ---------------------------------------------------------- registration
    def _registries(self):
        try:
            return self._parameters, self._modules, self._buffers
        except AttributeError:
            raise AttributeError(
                f"{type(self).__name__}: call super().__init__() before assigning parameters or sub-modules"
            ) from None

    def __setattr__(self, name: str, value) -> None:
        params, modules, buffers = self._registries()
        for reg in (params, modules):
            reg.pop(name, None)
        if isinstance(value, Parameter):
            params[name] = value
        elif isinstance(value, Module):
            modules[name] = value
        elif name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"buffer {name!r} must be a Tensor or None, got {type(value).__name__}")
            buffers[name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        for reg in self._registries():
            reg.pop(name, None)
        self._persistent.discard(name)
        object.__delattr__(self, name)

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """State that is not a parameter: moved by ``to``, saved in state_dict when persistent."""
        self._registries()[2][name] = tensor
        if persistent:
            self._persistent.add(name)
        else:
            self._persistent.discard(name)
        object.__setattr__(self, name, tensor)

    # ---------------------------------------------------------- traversal
    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, "Module"]]:
        """(name, module) for this module and every sub-module, depth first; each module once."""
        seen = set()
        stack = [(prefix, self)]
        while stack:
            name, m = stack.pop()
            if id(m) in seen:
                continue
            seen.add(id(m))
            yield name, m
            children = [(f"{name}.{k}" if name else k, c) for k, c in m._modules.items() if c is not None]
            stack.extend(reversed(children))

    def modules(self) -> Iterator["Module"]:
        for _, m in self.named_modules():
            yield m

    def children(self) -> Iterator["Module"]:
        yield from (m for m in self._modules.values() if m is not None)

    def named_parameters(self, prefix: str = "", remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, parameter) pairs; a parameter shared by two modules is listed once."""
        seen = set()
        for mname, m in self.named_modules(prefix):
            for k, p in m._parameters.items():
                if p is None or (remove_duplicate and id(p) in seen):
                    continue
                seen.add(id(p))
                yield (f"{mname}.{k}" if mname else k), p

    def parameters(self) -> list[Parameter]:
        """Every distinct parameter (shared ones once), in registration order."""
        return [p for _, p in self.named_parameters()]

    def named_buffers(self) -> Iterator[tuple[str, Tensor]]:
        for mname, m in self.named_modules():
            for k, b in m._buffers.items():
                if b is not None:
                    yield (f"{mname}.{k}" if mname else k), b

    def num_parameters(self) -> int:
        """How many scalar weights the model has (shared weights counted once)."""
        return sum(p.size for p in self.parameters())

    # ---------------------------------------------------------- state
    def state_dict(self) -> "OrderedDict[str, Tensor]":
        """Every parameter (under each of its names) and persistent buffer, as detached tensors."""
        out = OrderedDict()
        for mname, m in self.named_modules():
            for k, p in m._parameters.items():
                if p is not None:
                    out[f"{mname}.{k}" if mname else k] = p.detach()
            for k, b in m._buffers.items():
                if b is not None and k in m._persistent:
                    out[f"{mname}.{k}" if mname else k] = b.detach()
        return out

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        """Copy values (tensors or arrays) into this module's parameters and buffers.

        Shapes must match exactly. With ``strict`` every key must match too; the error lists
        the missing and unexpected keys.
        """
        own = self.state_dict()
        targets = {}
        for mname, m in self.named_modules():
            for reg in (m._parameters, m._buffers):
                for k, t in reg.items():
                    if t is not None:
                        targets[f"{mname}.{k}" if mname else k] = t
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        if strict and (missing or unexpected):
            raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
        bad = []
        for k, v in state.items():
            if k not in own:
                continue
            arr = v.data if isinstance(v, Tensor) else v
            if tuple(arr.shape) != own[k].shape:
                bad.append(f"{k}: checkpoint {tuple(arr.shape)} vs model {own[k].shape}")
        if bad:
            raise ValueError("load_state_dict: shape mismatch for " + "; ".join(bad))
        for k, v in state.items():
            if k in targets:
                t = targets[k]
                arr = v.data if isinstance(v, Tensor) else v
                t.data = backend.xp_for(t.device).array(backend.to_device(arr, t.device), dtype=t.dtype, copy=True)

    # ---------------------------------------------------------- modes and devices
    def train(self, mode: bool = True) -> "Module":
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def to(self, device) -> "Module":
        """Move every parameter, gradient and buffer to ``device`` in place; returns self."""
        device = backend.normalize_device(device)
        for m in self.modules():
            for t in list(m._parameters.values()) + list(m._buffers.values()):
                if t is None:
                    continue
                t.data = backend.to_device(t.data, device)
                if t.grad is not None:
                    t.grad.data = backend.to_device(t.grad.data, device)
        return self

    def zero_grad(self) -> None:
        """Drop every parameter's gradient (the next backward starts from zero)."""
        for p in self.parameters():
            p.grad = None

    def astype(self, dtype) -> "Module":
        """Convert floating parameters and buffers to ``dtype`` in place (e.g. float64 for gradcheck)."""
        for m in self.modules():
            for t in list(m._parameters.values()) + list(m._buffers.values()):
                if t is not None and t.dtype.kind == "f":
                    t.data = t.data.astype(dtype)
        return self

    # ---------------------------------------------------------- calling
    def forward(self, *args, **kwargs):  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for k, m in self._modules.items():
            sub = repr(m).replace("\n", "\n  ")
            lines.append(f"  ({k}): {sub}")
        if len(lines) == 1:
            return lines[0] + ")"
        return "\n".join(lines) + "\n)"


class ModuleList(Module):
    """A list of modules, each registered (named "0", "1", ...)."""

    def __init__(self, modules=()):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, module: Module) -> "ModuleList":
        if not isinstance(module, Module):
            raise TypeError(f"ModuleList holds Modules, got {type(module).__name__}")
        setattr(self, str(len(self._modules)), module)
        return self

    def __getitem__(self, i: int) -> Module:
        return list(self._modules.values())[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


class Sequential(ModuleList):
    """Modules applied one after another: ``Sequential(a, b)(x) == b(a(x))``."""

    def __init__(self, *modules: Module):
        super().__init__(modules)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x


