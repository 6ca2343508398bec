"""What every job trains with: the one loop, the train state and step, optimizer, losses,
the checkpoint policy, sharding and throughput accounting."""
