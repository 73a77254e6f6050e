/** Events owned by the resources (plain data; see `resourceHandlers` in `index.ts`). */
export type LinkName = 'h2d' | 'd2h';

export type ResourceEvent =
  | { readonly kind: 'gpu.kernelDone'; readonly stream: number }
  | { readonly kind: 'link.latencyDone'; readonly link: LinkName }
  | { readonly kind: 'link.packetDone'; readonly link: LinkName }
  | { readonly kind: 'link.runDone'; readonly link: LinkName }
  | { readonly kind: 'fluid.flowDone'; readonly flowId: number }
  | { readonly kind: 'cpu.taskDone'; readonly taskId: number };

/** Events of the SSD tier's NVMe link (only executors that build it handle them: `storageHandlers`). */
export type StorageEvent =
  | { readonly kind: 'nvme.latencyDone'; readonly readId: number }
  | { readonly kind: 'nvme.dataDone' };
