/** The one place that names streams; every adapter and reader goes through it. */
export const streamPrefixes = { workspace: 'workspace-', solution: 'solution-' } as const;

export const workspaceStream = (workspaceId: string) => `${streamPrefixes.workspace}${workspaceId}`;
export const solutionStream = (solutionId: string) => `${streamPrefixes.solution}${solutionId}`;
