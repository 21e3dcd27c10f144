/**
 * CPU accounting for benches (Linux, /proc): a process, the PostgreSQL server (postmaster with
 * its reaped and live children) and the whole machine, so that a figure taken on a busy or
 * stolen-from machine can be told apart from the work's own cost.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import type pg from 'pg';

export const ticksPerSecond = 100;
export function processTicks(pid: number): { own: number; children: number } | undefined {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return { own: Number(fields[11]) + Number(fields[12]), children: Number(fields[13]) + Number(fields[14]) };
  } catch {
    return undefined;
  }
}
export function postgresTicks(postmasterPid: number | undefined): number | undefined {
  if (!postmasterPid) return undefined;
  const main = processTicks(postmasterPid);
  if (!main) return undefined;
  let total = main.own + main.children;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      if (Number(stat.split(') ')[1]!.split(' ')[1]) === postmasterPid) total += processTicks(Number(entry))?.own ?? 0;
    } catch {
      // gone meanwhile
    }
  }
  return total;
}
export function machineTicks(): { busy: number; steal: number; total: number } {
  const cpu = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const [user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0] = cpu;
  return { busy: user + nice + system + irq + softirq, steal, total: user + nice + system + idle + iowait + irq + softirq + steal };
}

/**
 * The postmaster of a server on this machine whose data directory this process can read (a
 * DATABASE_URL server run locally): its CPU is then counted too, as the whole server's.
 */
export async function localPostmaster(pool: pg.Pool | pg.Client): Promise<number | undefined> {
  try {
    const { rows } = await pool.query<{ data_directory: string }>('SHOW data_directory');
    return Number(readFileSync(path.join(rows[0]!.data_directory, 'postmaster.pid'), 'utf8').split('\n')[0]) || undefined;
  } catch {
    // Another machine's server, or one whose directory this user may not read: left uncounted.
    return undefined;
  }
}

/** CPU seconds so far of a service process, a PostgreSQL server (when on this machine) and this process (the load, the receivers). */
export type CpuSeconds = { service: number; postgres: number; bench: number };

export function cpuSeconds(servicePid: number, postmasterPid: number | undefined): CpuSeconds {
  const usage = process.cpuUsage();
  return {
    service: (processTicks(servicePid)?.own ?? NaN) / ticksPerSecond,
    postgres: (postgresTicks(postmasterPid) ?? NaN) / ticksPerSecond,
    bench: (usage.user + usage.system) / 1e6,
  };
}

/** The CPU seconds spent between `before` and `after`, summed into `total`. */
export function addCpu(total: CpuSeconds, before: CpuSeconds, after: CpuSeconds): void {
  for (const part of ['service', 'postgres', 'bench'] as const) total[part] += after[part] - before[part];
}

/** CPU milliseconds per create in each part, from the CPU seconds spent on `made` creates. */
export function cpuPerCreate(spent: CpuSeconds, made: number): string {
  const per = (part: keyof CpuSeconds) => ((spent[part] * 1000) / made).toFixed(2);
  // A server on another machine is not counted (NaN).
  const postgres = Number.isNaN(spent.postgres) ? 'PostgreSQL not counted (another machine)' : `PostgreSQL ${per('postgres')}`;
  return `service ${per('service')}, ${postgres}, bench ${per('bench')} ms CPU per create`;
}
