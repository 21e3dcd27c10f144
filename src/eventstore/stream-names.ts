/** The one place that names streams; every adapter and reader goes through it. */
export const streamPrefixes = { workspace: 'workspace-', solution: 'solution-' } as const;

export const workspaceStream = (workspaceId: string) => `${streamPrefixes.workspace}${workspaceId}`;
export const solutionStream = (solutionId: string) => `${streamPrefixes.solution}${solutionId}`;

/** Whether a stream holds this service's records (a shared store may hold others, and system streams). */
export const isServiceStream = (streamName: string) =>
  streamName.startsWith(streamPrefixes.workspace) || streamName.startsWith(streamPrefixes.solution);
