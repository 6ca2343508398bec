"""corpora.split_sentences, which --input_format=text (files and TFDS texts) splits paragraphs
with: after . ! ? and the full-width 。！？, not after a title, an abbreviation or an initial."""

from bertjax.pretraining_data import corpora


def test_running_text_splits_at_sentence_ends_only():
  """Pass AE: 'Mr.', 'e.g.', 'Fig.' and initials ended sentences, 。！？ did not (NSP segments
  cut mid-sentence; a CJK paragraph read as one long sentence)."""
  split = corpora.split_sentences
  assert split('Mr. Smith went to Washington. He left.') == [
      'Mr. Smith went to Washington.', 'He left.']
  assert split('The U.S.A. is big. It is e.g. large, cf. Fig. 3 and St. Paul.') == [
      'The U.S.A. is big.', 'It is e.g. large, cf. Fig. 3 and St. Paul.']
  assert split('J. R. R. Tolkien wrote. So do I. Really? Yes!') == [
      'J. R. R. Tolkien wrote.', 'So do I.', 'Really?', 'Yes!']
  assert split('(See Fig. 3.) Then "Stop." Then 3.5 more.') == [
      '(See Fig. 3.)', 'Then "Stop."', 'Then 3.5 more.']
  assert split('我们走吧。他说：“好！”然后走了？是的') == [
      '我们走吧。', '他说：“好！”', '然后走了？', '是的']
  # The embedded corpus was built without the exceptions: its rebuild gives the shipped text.
  assert split('There; and St. Nicholas be thy speed!', abbreviations=False) == [
      'There; and St.', 'Nicholas be thy speed!']
