/** The part of seek-bzip (no types of its own) registry.ts uses: bzip2 decoding into a byte sink. */
declare module 'seek-bzip' {
	const Bunzip: {
		decode(input: Buffer, output: { writeByte(byte: number): void }, multistream?: boolean): void;
	};
	export = Bunzip;
}
