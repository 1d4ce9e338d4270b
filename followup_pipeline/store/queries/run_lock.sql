-- name: try_run_lock
-- Take the session advisory lock of a run name if it is free; held until the connection closes.
SELECT pg_try_advisory_lock(%(key)s) AS held;

-- name: run_lock_holder
-- Who holds a run lock: an advisory lock on a bigint key shows in pg_locks as two 32-bit halves.
SELECT a.pid, a.application_name, a.backend_start
  FROM pg_locks l
  JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted
   AND l.classid = %(high)s AND l.objid = %(low)s AND l.objsubid = 1;

-- name: run_lock_release
-- Let go of a session advisory lock this connection took (the others it holds stay held).
SELECT pg_advisory_unlock(%(key)s) AS released;
