"""Sharded programs for the benchmarks' sharded suite: the models of ``models.py`` over a mesh.

Needs four devices: run with ``XLA_FLAGS=--xla_force_host_platform_device_count=4`` (the
``sharded`` part of ``run.py`` sets it for its sessions). Data parallel: parameters
replicated, the batch split over the mesh, so XLA's SPMD partitioner inserts the gradient
all-reduces; tensor parallel: the MLP's hidden dimension split over a ``model`` axis as well;
``shard_map``: the same training step with its own ``pmean``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from benchmarks.corpora import models


def _mesh(shape: tuple[int, ...], names: tuple[str, ...]) -> Mesh:
    count = int(np.prod(shape))
    if jax.device_count() < count:
        raise RuntimeError(
            f"the sharded suite needs {count} devices, found {jax.device_count()}: run with "
            "XLA_FLAGS=--xla_force_host_platform_device_count=4"
        )
    return Mesh(np.array(jax.devices()[:count]).reshape(shape), names)


def _put(tree: Any, mesh: Mesh, spec: P) -> Any:
    return jax.device_put(tree, NamedSharding(mesh, spec))


def make_dp_mlp_train():
    fn, (params, x, y) = models.make_mlp_train()
    mesh = _mesh((4,), ("data",))
    return fn, (_put(params, mesh, P()), _put(x, mesh, P("data")), _put(y, mesh, P("data")))


def block_grad(params: dict[str, jax.Array], x: jax.Array) -> dict[str, jax.Array]:
    return jax.grad(lambda p: jnp.mean(models.block(p, x, heads=4) ** 2))(params)


def make_dp_transformer_grad():
    _, (params, x) = models.make_transformer_block(batch=8, seq=32, d=64)
    mesh = _mesh((4,), ("data",))
    return block_grad, (_put(params, mesh, P()), _put(x, mesh, P("data")))


def convnet_grad(params: dict[str, jax.Array], images: jax.Array) -> dict[str, jax.Array]:
    return jax.grad(lambda p: jnp.mean(models.convnet(p, images) ** 2))(params)


def make_dp_convnet_grad():
    _, (params, images) = models.make_convnet(batch=8, size=16, channels=(8, 16))
    mesh = _mesh((4,), ("data",))
    return convnet_grad, (_put(params, mesh, P()), _put(images, mesh, P("data")))


def make_tp_mlp_train():
    """Megatron-style: each hidden layer's weight split over ``model``, the batch over
    ``data``; the partitioner adds all-reduces and all-gathers between the shards."""
    fn, (params, x, y) = models.make_mlp_train()
    mesh = _mesh((2, 2), ("data", "model"))
    specs = [P(None, "model"), P("model", None), P(None, None)]
    placed = [
        {"w": _put(layer["w"], mesh, spec), "b": _put(layer["b"], mesh, P(spec[1]))}
        for layer, spec in zip(params, specs, strict=True)
    ]
    return fn, (placed, _put(x, mesh, P("data")), _put(y, mesh, P("data")))


def make_shard_map_train():
    """The data-parallel step written with ``shard_map``: its own ``pmean`` of gradients."""
    _, (params, x, y) = models.make_mlp_train()
    mesh = _mesh((4,), ("data",))

    def local(params, x, y):
        def loss(p):
            return -jnp.mean(jnp.sum(jax.nn.log_softmax(models.mlp(p, x)) * y, axis=-1))

        grads = jax.lax.pmean(jax.grad(loss)(params), "data")
        return jax.tree_util.tree_map(lambda p, g: p - 1e-2 * g, params, grads)

    def train_step(params, x, y):
        specs = (P(), P("data"), P("data"))
        return jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=P())(params, x, y)

    return train_step, (params, x, y)


CASES: dict[str, Callable[[], tuple[Callable[..., Any], tuple[Any, ...]]]] = {
    "dp_mlp_train": make_dp_mlp_train,
    "dp_transformer_grad": make_dp_transformer_grad,
    "dp_convnet_grad": make_dp_convnet_grad,
    "tp_mlp_train": make_tp_mlp_train,
    "shard_map_train": make_shard_map_train,
}
