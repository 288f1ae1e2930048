// Placeholder: the Burst-Gap model is being written (see docs/xstage-probe.md).
