-- Redaction (issue 23 §4): how many matches a workspace's detectors found in a call's
-- arguments and result. Counts only: nothing of what they found is ever stored. NULL on rows
-- written before (and restored from snapshots taken before) the column existed.
ALTER TABLE activity ADD COLUMN redactions integer;
