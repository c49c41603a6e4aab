"""GPUs through Dynamic Resource Allocation (``resource.k8s.io/v1``), as a pure core.

``objects`` reads ResourceSlices, DeviceClasses and claims; ``selectors`` evaluates their
CEL selectors on published devices; ``flavours`` says which Tidegate flavour a device is;
``demand`` turns a pod's claims into the flavour alternatives the queue admits on, and
counts what Kubernetes' ResourceQuota charges per device class. No Django here.
"""
