// A clock of this process's CPU time (every thread, user and system), for tests that bound how much
// work something takes: unlike wall time, other processes on a busy machine do not move it.
export function cpuClock(): () => number {
  const start = process.cpuUsage();
  return () => {
    const u = process.cpuUsage(start);
    return (u.user + u.system) / 1000;
  };
}
