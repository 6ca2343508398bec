"""TFRecord files written with numpy: the framing and CRC32C of many records at once.

A TFRecord is `uint64 length, uint32 masked_crc32c(length), data, uint32 masked_crc32c(data)`,
little-endian. Writing record by record through tf.io.TFRecordWriter costs a Python call each
and needs TensorFlow in the process (seconds to import); here a whole chunk of records is
framed with array operations, and one `write` call stores it.

CRC32C over a batch: records are right-aligned in a zero-padded matrix. With a zero initial
register, leading zero bytes leave the CRC at zero, so padding changes nothing; the standard
initial value 0xFFFFFFFF is applied instead by XOR-ing it into each record's first four bytes
(a reflected CRC folds its register into the next four input bytes). The matrix is then
consumed four bytes per step for all records together, with two 64 Ki-entry tables; the
Python work left per record is joining its three pieces.
"""

import numpy as np

_POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected.
_MASK_DELTA = 0xA282EAD8
_TABLES = []


def _tables():
  """(low, high): CRC contributions of the low and high 16 bits of the register."""
  if not _TABLES:
    byte = np.arange(256, dtype=np.uint32)
    t0 = byte.copy()
    for _ in range(8):
      t0 = np.where(t0 & 1, (t0 >> 1) ^ np.uint32(_POLY), t0 >> 1).astype(np.uint32)
    tables = [t0]  # tables[k][b]: byte b followed by k zero bytes.
    for _ in range(3):
      tables.append((tables[-1] >> 8) ^ t0[tables[-1] & 0xFF])
    half = np.arange(1 << 16, dtype=np.uint32)
    low = tables[3][half & 0xFF] ^ tables[2][half >> 8]
    high = tables[1][half & 0xFF] ^ tables[0][half >> 8]
    _TABLES.extend([low, high])
  return _TABLES


def masked_crc32c(flat, lengths):
  """TFRecord's masked CRC32C of each record of a flat uint8 buffer; uint32 [N]."""
  lengths = np.asarray(lengths, np.int64)
  num = len(lengths)
  if num == 0:
    return np.zeros(0, np.uint32)
  if lengths.min() < 4:
    raise ValueError('records shorter than 4 bytes are not supported here')
  width = -(-int(lengths.max()) // 4) * 4
  # Row i: the `width` bytes ending where record i ends, then the bytes before it zeroed.
  ends = np.cumsum(lengths)
  windows = np.lib.stride_tricks.sliding_window_view(
      np.concatenate([np.zeros(width, np.uint8), flat]), width)
  padded = windows[ends]
  lead = width - lengths
  padded[np.arange(width) < lead[:, None]] = 0
  rows = np.arange(num)
  for k in range(4):
    padded[rows, lead + k] ^= 0xFF
  words = np.ascontiguousarray(padded.view('<u4').T)  # [width / 4, num]: one step per row.
  low, high = _tables()
  crc = np.zeros(num, np.uint32)
  for word in words:
    crc ^= word
    crc = low.take(crc & 0xFFFF) ^ high.take(crc >> 16)
  crc ^= np.uint32(0xFFFFFFFF)
  return (((crc >> 15) | (crc << 17)) + np.uint32(_MASK_DELTA)).astype(np.uint32)


def frame(records):
  """The TFRecord file bytes of a list of records (bytes)."""
  num = len(records)
  if not num:
    return b''
  lengths = np.fromiter(map(len, records), np.int64, num)
  data = b''.join(records)
  header = lengths.astype('<u8').view(np.uint8)
  header_crc = masked_crc32c(header, np.full(num, 8))
  data_crc = masked_crc32c(np.frombuffer(data, np.uint8), lengths).astype('<u4').tobytes()
  heads = np.concatenate([header.reshape(num, 8),
                          header_crc.astype('<u4').view(np.uint8).reshape(num, 4)], 1).tobytes()
  parts = []
  for i, record in enumerate(records):
    parts += (heads[12 * i:12 * i + 12], record, data_crc[4 * i:4 * i + 4])
  return b''.join(parts)


def read_records(data: bytes):
  """The records of TFRecord file bytes, in order (what `frame` wrote). A record cut short at
  the end (a file still being written) ends the iteration; its lengths' CRC is checked, so a
  misread length never runs away. Used to read small files (TensorBoard events) without
  TensorFlow; tf.data reads the training data."""
  view, offset = memoryview(data), 0
  while offset + 12 <= len(view):
    header = np.frombuffer(view[offset:offset + 8], np.uint8)
    (crc,) = np.frombuffer(view[offset + 8:offset + 12], '<u4')
    if masked_crc32c(header, [8])[0] != crc:
      raise ValueError(f'TFRecord data is damaged at byte {offset} (length CRC)')
    length = int(header.view('<u8')[0])
    end = offset + 12 + length + 4
    if end > len(view):
      return
    yield bytes(view[offset + 12:offset + 12 + length])
    offset = end
