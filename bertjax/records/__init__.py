"""Pre-training records, shared by who writes them and who reads them: the packed-row layout
(packing), the shard sets with their JSON reports (file_set), and after data creation moves in,
the TFRecord framing and Example encoding. Data creation, the input pipeline and fine-tuning's
packer all import from here, so none climbs into another stage for them.
"""
