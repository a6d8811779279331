"""The version of Cadenza, where every package may read it without importing the root
package (which names the public API above them all)."""

__version__ = "0.1.0"
