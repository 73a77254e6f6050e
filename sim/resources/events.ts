/** Events owned by the resources (plain data; see `resourceHandlers` in `index.ts`). */
export type LinkName = 'h2d' | 'd2h';

export type ResourceEvent =
  | { readonly kind: 'gpu.kernelDone'; readonly stream: number }
  | { readonly kind: 'link.latencyDone'; readonly link: LinkName }
  | { readonly kind: 'link.packetDone'; readonly link: LinkName }
  | { readonly kind: 'link.runDone'; readonly link: LinkName }
  | { readonly kind: 'fluid.flowDone'; readonly flowId: number }
  | { readonly kind: 'cpu.taskDone'; readonly taskId: number };
