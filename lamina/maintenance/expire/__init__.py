"""Version expiry and garbage collection that never frees what a tag or a retained version needs.

The rule. A data file's manifests record the one
interval ``[added_version, removed_version)`` in which it is live. After some
versions are deleted, a file is still needed iff some *kept point* -- an
existing version or a tag's version -- lies in its interval. Candidates are
only files whose removal was recorded by a version next to a deleted one, so
deciding costs what changed (the roots and the leaves those versions wrote),
not a walk over every tag's or version's full file list. The one case the
interval cannot describe -- a rollback re-adding a file an earlier version
removed, so the file has several intervals, some recorded only by versions
already deleted -- is flagged in the version manifest
(``last_readd_version``); on such a table the candidates are checked against
the full walk of every surviving version and tag instead (exact, slower).

Manifests are carried only from a version's parent, so the versions whose
roots reference one manifest form a contiguous run: a manifest referenced by
a deleted root is free unless the nearest surviving root on either side, or a
tag, references it.

Ordering, so that concurrent work stays safe:
1. the versions are recorded as expired first (oldest first), so nobody can
   open an expired version any more;
2. then tags are listed and the latest version re-read, so a tag created or a
   rollback committed during the run is honoured (``TagStore.create`` and
   rollback confirm their source version still exists after writing);
3. then manifests and data files go.

Reader safety: a version is expired only once its successor has been current
for ``reader_grace`` (default one hour, property ``expire.reader-grace-ms``):
a reader that opened it while it was current has had that long to finish.

Writer safety (slot reuse): expiry first writes one range record per chunk of
slots it expires, naming the commit each slot held; the expired versions' files
stay, so their names stay taken and a writer whose put-if-absent was delayed finds
the slot occupied and rebases. Once a record is older than
``expire.slot-retention-ms`` the slot files in its range are deleted (freed). A
put that lands in a freed slot is withdrawn by its own writer, which looks the
records up after every landing (lamina.spec.slot, docs/format.md). Tables
without the feature ``slot-range-records`` get a tombstone per expired slot and
chunks freed whole, as before.

What a run reads (one GET each on S3): the versions its decisions need, not every
version it expires (``reads._Run``).

The package is split by what a run frees:

- ``versions``: ``expire_versions`` (which versions expire, in the order above) and the
  destructive rollback's ``drop_versions_after``: versions stop being versions;
- ``files``: what deleting versions frees (manifests, data and DV files) and its deletion;
- ``tags``: what a deleted tag, an expired tag or a deleted branch alone held;
- ``slots``: the range records and tombstones that keep expired slots taken, and their freeing;
- ``reads``: what a run reads of the versions (as little as it can), shared by the above;
- ``report``: ``ExpireReport``, what a run did.
"""

from lamina.maintenance.expire.report import ExpireReport
from lamina.maintenance.expire.tags import delete_tag, free_tag
from lamina.maintenance.expire.versions import DEFAULT_OLDER_THAN, drop_versions_after, expire_versions

__all__ = ["DEFAULT_OLDER_THAN", "ExpireReport", "delete_tag", "drop_versions_after", "expire_versions", "free_tag"]
