"""Where each example of a host's pre-training stream comes from, computed instead of replayed.

A host's stream is a sequence of epochs over the files it reads. Epoch e takes those files in a
seeded permutation and deals them round-robin into `num_lanes` lanes (lane j reads files j,
j + num_lanes, ... back to back); the lanes are interleaved one record at a time, the result is
optionally sharded per example across hosts, and cut into windows of `window` records that are
each permuted by a seeded index shuffle. Every step is a pure function of (seed, epoch, record
counts), so `plan_epoch` turns any stream position into per-lane skips: resuming costs a seek in
at most `num_lanes` files plus reading one window, never a replay of what came before.

This module is numpy only; input_pipeline.py builds the tf.data graph from its plans.
"""

import dataclasses

import numpy as np

_UINT64_MASK = (1 << 64) - 1


def file_order(num_files: int, seed: int, epoch: int) -> np.ndarray:
  """A seeded permutation of range(num_files) for one epoch."""
  # Philox's raw output is fixed by its definition, unlike numpy's shuffle algorithms, so the
  # order survives numpy upgrades and is the same on every host.
  key = np.array([seed & _UINT64_MASK, epoch & _UINT64_MASK], dtype=np.uint64)
  draws = np.random.Philox(key=key).random_raw(num_files)
  return np.argsort(draws, kind='stable')


def examples_in_shard(total: int, shard_count: int, shard_index: int) -> int:
  """How many of `total` records `Dataset.shard(shard_count, shard_index)` keeps."""
  return len(range(shard_index, total, shard_count))


def round_robin_consumed(lengths, skip: int) -> tuple[np.ndarray, int]:
  """Records taken from each lane, and the lane read next, after `skip` round-robin reads.

  The lanes are read one record each in order, a lane that runs out dropping out of the cycle
  (what tf.data's interleave does with cycle_length equal to the number of lanes).
  """
  lengths = np.asarray(lengths, dtype=np.int64)
  if not 0 <= skip <= lengths.sum():
    raise ValueError(f'cannot skip {skip} records of lanes holding {lengths.sum()}')
  # Full rounds: the largest r with sum(min(lengths, r)) <= skip (monotone in r).
  lo, hi = 0, int(lengths.max(initial=0))
  while lo < hi:
    mid = (lo + hi + 1) // 2
    if np.minimum(lengths, mid).sum() <= skip:
      lo = mid
    else:
      hi = mid - 1
  consumed = np.minimum(lengths, lo)
  alive = np.flatnonzero(lengths > lo)  # Lanes still in the cycle during round lo + 1.
  partial = skip - int(consumed.sum())  # < len(alive), or lo would be larger.
  consumed[alive[:partial]] += 1
  next_lane = int(alive[partial]) if partial < len(alive) else 0
  return consumed, next_lane


@dataclasses.dataclass(frozen=True)
class EpochPlan:
  """What to read for (the rest of) one epoch of a host's stream."""

  epoch: int
  lane_files: tuple[tuple[str, ...], ...]  # In interleave order; only lanes with records left.
  lane_skips: tuple[int, ...]  # Records to skip in the first file of each lane.
  first_window: int  # Index within the epoch of the first shuffle window read.
  skip_in_window: int  # Records of that (shuffled) window already consumed.


def plan_epoch(files, counts, *, epoch: int, start: int, seed: int, num_lanes: int, window: int,
               shard_count: int, shard_index: int, shuffle: bool) -> EpochPlan:
  """The plan that yields epoch `epoch` of the stream from its `start`-th example on."""
  counts = np.asarray(counts, dtype=np.int64)
  length = examples_in_shard(int(counts.sum()), shard_count, shard_index)
  if not 0 <= start < length:
    raise ValueError(f'start {start} is outside an epoch of {length} examples')
  order = file_order(len(files), seed, epoch) if shuffle else np.arange(len(files))
  lanes = [order[j::num_lanes] for j in range(min(num_lanes, len(files)))]
  lengths = [int(counts[lane].sum()) for lane in lanes]
  # Resume at the start of the window holding `start`: the window must be read whole to be
  # shuffled the same way, and each of its records is shard_count records of the interleave.
  first_window, skip_in_window = divmod(start, window)
  consumed, next_lane = round_robin_consumed(lengths, first_window * window * shard_count)
  lane_files, lane_skips = [], []
  for j in np.roll(np.arange(len(lanes)), -next_lane):
    taken = int(consumed[j])
    if taken == lengths[j]:
      continue
    # Drop the lane's files read in full; skip inside the first partly read one.
    lane_counts = counts[lanes[j]]
    done = int(np.searchsorted(np.cumsum(lane_counts), taken, side='right'))
    lane_files.append(tuple(files[i] for i in lanes[j][done:]))
    lane_skips.append(taken - int(lane_counts[:done].sum()))
  return EpochPlan(epoch=epoch, lane_files=tuple(lane_files), lane_skips=tuple(lane_skips),
                   first_window=first_window, skip_in_window=skip_in_window)


def epoch_plans(files, counts, *, start: int, **plan_args):
  """Plans for the stream from its `start`-th example on (counting across epochs), forever."""
  shard_count, shard_index = plan_args['shard_count'], plan_args['shard_index']
  length = examples_in_shard(int(np.sum(counts)), shard_count, shard_index)
  epoch, within = divmod(start, length)
  while True:
    yield plan_epoch(files, counts, epoch=epoch, start=within, **plan_args)
    epoch, within = epoch + 1, 0


# Odd (2**32 / the golden ratio): epoch -> epoch * _EPOCH_MIX mod 2**32 is one-to-one.
_EPOCH_MIX = 0x9E3779B1


def window_seed(seed: int, epoch: int, window_index):
  """The stateless seed that shuffles one window (works on ints and on int64 tensors).

  index_shuffle keys its permutation with the low 32 bits of each of the seed's two words: the
  epoch is mixed into the first (one-to-one over 2**32 epochs; epoch 0's seeds are unchanged).
  As epoch * 2**32 + window_index in the second it was dropped, and every epoch repeated epoch
  0's permutations: a corpus of one file (or of one window) was read in one order every epoch."""
  return [(seed + epoch * _EPOCH_MIX) % (1 << 32), window_index]
