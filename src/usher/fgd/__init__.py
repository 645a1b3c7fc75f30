"""The FGD comparison (``usher bench fgd``): the paper's method on the Alibaba GPU trace v2023.

Pods from a pod list arrive one by one on a cluster from a node list, in an order shuffled with
the seed and tuned to 130% of the cluster's GPUs; they never leave, and a pod that fits nowhere
stays unplaced. The baselines (``policies``) are our implementations of the paper's definitions;
``usher`` is the engine's own placement (``engine_policy``). ``runner.run_bench`` runs them and
``report`` writes the table and the plot.
"""
