"""Dynamic Resource Allocation (``resource.k8s.io/v1``) as kube-apiserver keeps it, and the shapes
the sandbox's GPU driver publishes.

What the sandbox publishes (the contract usher's allocator may rely on; it is NVIDIA's
``dra-driver-nvidia-gpu`` layout, so users' manifests work unchanged):

- **DeviceClass** ``gpu.nvidia.com``, as NVIDIA's chart installs it: one selector,
  CEL ``device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'``.
- **One ResourceSlice per GPU node** (a node whose ``status.allocatable`` has ``nvidia.com/gpu``
  > 0), named ``<node>-gpu.nvidia.com-<suffix>`` (generateName ``<node>-gpu.nvidia.com-``), with
  ``spec.driver: gpu.nvidia.com``, ``spec.nodeName: <node>``, ``spec.pool: {name: <node>,
  generation: <n>, resourceSliceCount: 1}`` (the generation grows when the devices change), and an
  owner reference to the Node.
- **Devices** ``gpu-<minor>`` (minor = the GPU's index on the node, ``0..n-1``), each with the
  attributes NVIDIA's driver sets for a full GPU (names unqualified = in the driver's domain
  ``gpu.nvidia.com``): ``type`` ``"gpu"``, ``uuid`` (``GPU-<uuid5 of node and index>``),
  ``productName`` (the node's ``nvidia.com/gpu.product`` label), ``brand`` ``"Nvidia"``,
  ``architecture`` (from the product: ``Hopper``, ``Ampere``, ``Blackwell``, ...),
  ``cudaComputeCapability``, ``driverVersion``, ``cudaDriverVersion`` (version values),
  ``resource.kubernetes.io/pciBusID`` and ``resource.kubernetes.io/pcieRoot`` (two GPUs a root),
  and ``capacity: {memory: {value: <bytes, binary SI>}}`` from ``nvidia.com/gpu.memory`` (MiB).
- **NVLink islands** (the sandbox's own, NOT NVIDIA's: NVIDIA's driver publishes no island
  attribute for single-node NVLink): ``sandbox.usher/nvlinkIsland`` (int) = the index of the
  device's island in the node's ``usher/nvlink`` annotation (``0,1,2,3;4,5,6,7`` -> islands 0 and
  1); a node without the annotation has one island, 0. A ``matchAttribute`` of
  ``sandbox.usher/nvlinkIsland`` keeps a claim's GPUs in one island.
- **Health**: a GPU the node's ``usher/gpu-health`` annotation names unhealthy is left out of
  the slice (what NVIDIA's driver does with a device its health check marks unhealthy when DRA
  device taints are off), and the pool's generation grows.

This module holds the registry's side of the four kinds (DeviceClass, ResourceSlice,
ResourceClaim with its status subresource, ResourceClaimTemplate): their names and words, the
validation of the fields that matter with the real field paths and messages, and the update
rules (a claim's spec is immutable; ``status.allocation`` is set once and only cleared;
``status.reservedFor`` at most 256 entries). The resourceclaim controller is
:mod:`usher.sandbox.dra_controller`, the driver stand-in :mod:`usher.sandbox.gpu_driver`.
"""
