"""xcclrun: the job's shape from the environment it runs in, then torchrun's elastic agent.

``environment.detect()`` reads Slurm, Open MPI, MPICH/PMI, Kubeflow PyTorchJob or plain
flags into a :class:`~torch_xccl.launcher.environment.JobShape`; ``cli.main()`` turns that into
a torchrun command (one launcher per node) or, when the scheduler already started one process
per rank (srun/mpirun with several tasks per node), into the rank's environment and runs the
script directly. See docs/LAUNCH.md.
"""
